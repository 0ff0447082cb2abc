// The Check button of the current step, its result (message, hints, metrics, log) and the step's
// result history (/runs). Results of checks started elsewhere (another tab, `labserver check` in
// the terminal) arrive over SSE as `check.finished` and refresh the same views.

import { api, el, t, timeOf } from './common.js';

const STATUS_LABEL = {
  passed: 'passed', failed: 'failed', error: 'error', timeout: 'timeout', running: 'running',
  interrupted: 'interrupted', imported: 'imported', not_gradable: 'not_gradable',
};

export class StepChecks {
  constructor(labId, { onStatus } = {}) {
    this.labId = labId;
    this.step = null;
    this.busy = false;
    this.onStatus = onStatus || (() => {});
    this.button = document.getElementById('check-button');
    this.statusEl = document.getElementById('check-status');
    this.button.addEventListener('click', () => this.run());
    window.addEventListener('live:check.finished', (e) => {
      const d = e.detail;
      if (d.lab !== this.labId) return;
      this.onStatus(d.step, d.status);
      if (d.step === this.step && !this.busy) this.loadHistory(d.step, { showLatest: true });
    });
    window.addEventListener('live:check.queued', (e) => {
      // the fair check queue (services/grading/fair_queue.py): where my waiting check stands
      const d = e.detail;
      if (d.lab !== this.labId || !this.busy || d.step !== this.step) return;
      this.statusEl.textContent = t('check_queued', { position: d.position });
      this.statusEl.dataset.status = 'queued';
      this.statusEl.dataset.position = String(d.position);
    });
    window.addEventListener('live:resync', () => this.step && this.loadHistory(this.step));
  }

  article(step) { return document.getElementById(`step-${step}`); }

  select(step) {
    this.step = step;
    const locked = this.article(step).dataset.locked === 'true';
    this.button.disabled = locked || this.busy;
    this.statusEl.textContent = locked ? t('step_locked') : '';
    this.statusEl.dataset.status = '';
    this.loadHistory(step, { showLatest: this.article(step).querySelector('.check-result').hidden });
  }

  url(step, tail) {
    return `/api/v1/labs/${encodeURIComponent(this.labId)}/steps/${encodeURIComponent(step)}/${tail}`;
  }

  async run() {
    const step = this.step;
    if (!step || this.busy) return;
    this.busy = true;
    this.button.disabled = true;
    this.button.classList.add('busy');
    this.statusEl.textContent = t('checking');
    this.statusEl.dataset.status = 'running';
    document.body.dataset.check = 'running';
    try {
      const run = await api(this.url(step, 'check'), { method: 'POST' });
      this.showResult(step, run);
      this.onStatus(step, run.status);
      this.statusEl.textContent = t(STATUS_LABEL[run.status] || run.status);
      this.statusEl.dataset.status = run.status;
    } catch (err) {
      this.statusEl.textContent = err.message;
      this.statusEl.dataset.status = 'error';
    } finally {
      this.busy = false;
      this.button.classList.remove('busy');
      this.button.disabled = step === this.step && this.article(this.step).dataset.locked === 'true';
      document.body.dataset.check = 'done';
    }
    await this.loadHistory(step);
  }

  showResult(step, run) {
    const box = this.article(step).querySelector('.check-result');
    const parts = [
      el('p', { class: 'result-head' },
        el('span', { class: `badge status-${run.status}`, text: t(STATUS_LABEL[run.status] || run.status) }),
        el('span', { class: 'result-time', text: timeOf(run.finished_at || run.created_at) })),
      el('p', { class: 'result-message', text: run.message }),
    ];
    if (run.status === 'error' || run.status === 'timeout') parts.push(el('p', { class: 'result-note', text: t('check_error_note') }));
    if (run.hints && run.hints.length) {
      parts.push(el('div', { class: 'result-hints' }, el('p', { class: 'label', text: t('hints') }),
        el('ul', {}, run.hints.map((h) => el('li', { text: h })))));
    }
    const metrics = Object.entries(run.metrics || {});
    if (metrics.length) {
      parts.push(el('table', { class: 'result-metrics' }, el('caption', { text: t('metrics') }),
        metrics.map(([k, v]) => el('tr', {}, el('th', { text: k }), el('td', { text: typeof v === 'number' ? +v.toPrecision(6) : String(v) })))));
    }
    // tables the checker attached (e.g. the attendee's own decision log): every cell is a text
    // node, so whatever a cell quotes from the attendee's files shows as written, never as markup
    for (const table of run.tables || []) {
      parts.push(el('div', { class: 'result-table-wrap' }, el('table', { class: 'result-table' },
        el('caption', { text: table.title }),
        el('thead', {}, el('tr', {}, table.columns.map((c) => el('th', { scope: 'col', text: c })))),
        el('tbody', {}, table.rows.map((row) => el('tr', {}, row.map((c) => el('td', { text: c }))))))));
    }
    if (run.log) {
      parts.push(el('details', { class: 'result-log', open: run.status === 'error' || undefined },
        el('summary', { text: t('log') }), el('pre', { text: run.log })));
    }
    box.replaceChildren(...parts);
    box.dataset.status = run.status;
    box.hidden = false;
    if (step === this.step) box.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  }

  async loadHistory(step, { showLatest = false } = {}) {
    let runs;
    try { runs = await api(this.url(step, 'runs')); } catch (err) { return; }
    const article = this.article(step);
    const list = article.querySelector('.history-list');
    article.querySelector('.history-count').textContent = runs.length ? `(${runs.length})` : '';
    if (!runs.length) {
      list.replaceChildren(el('li', { class: 'empty', text: t('no_runs') }));
      return;
    }
    list.replaceChildren(...runs.map((run) => el('li', { class: `run status-${run.status}` },
      el('span', { class: `badge status-${run.status}`, text: t(STATUS_LABEL[run.status] || run.status) }),
      el('span', { class: 'run-time', text: timeOf(run.finished_at || run.created_at) }),
      el('span', { class: 'run-message', text: run.message.split('\n')[0] }))));
    const latest = runs[0];
    if (showLatest && latest.status !== 'running') this.showResult(step, latest);
  }
}
