// The post-event report's charts (templates/_instructor_report_body.html): a funnel (reached / passed / stopped
// per step) and the time to pass per step (median, p90), per lab, drawn with Chart.js from the
// report JSON in #report-data. A plain script (not a module) so the self-contained download can
// inline it. When every chart is drawn, <body data-charts="ready"> (tests wait for it).
(function () {
  const report = JSON.parse(document.getElementById('report-data').textContent);
  const t = JSON.parse(document.getElementById('report-strings').textContent);
  const byId = Object.fromEntries(report.labs.map((lab) => [lab.id, lab]));
  if (typeof window.Chart !== 'function') { document.body.dataset.charts = 'unavailable'; return; }
  const minutes = (s) => (s == null ? null : Math.round(s / 6) / 10);
  let drawn = 0;
  for (const canvas of document.querySelectorAll('canvas[data-chart]')) {
    const lab = byId[canvas.dataset.lab];
    if (!lab) continue;
    const labels = lab.steps.map((s) => `${s.index}. ${s.title}`.slice(0, 28));
    const datasets = canvas.dataset.chart === 'funnel'
      ? [
          { label: t.reached, data: lab.steps.map((s) => s.reached), backgroundColor: '#90cdf4' },
          { label: t.passed, data: lab.steps.map((s) => s.passed), backgroundColor: '#48bb78' },
          { label: t.stopped, data: lab.steps.map((s) => s.stopped_here), backgroundColor: '#f6ad55' },
        ]
      : [
          { label: t.median, data: lab.steps.map((s) => minutes(s.time_to_pass_s.median)), backgroundColor: '#4299e1' },
          { label: t.p90, data: lab.steps.map((s) => minutes(s.time_to_pass_s.p90)), backgroundColor: '#a0aec0' },
        ];
    const chart = new window.Chart(canvas, {
      type: 'bar',
      data: { labels, datasets },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: { y: { beginAtZero: true, title: { display: true, text: canvas.dataset.chart === 'funnel' ? t.attendees : t.minutes } } },
      },
    });
    canvas.chart = chart;  // tests read the drawn data back
    drawn += 1;
  }
  document.body.dataset.charts = 'ready';
  document.body.dataset.chartCount = String(drawn);
})();
