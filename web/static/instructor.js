/* The instructor's pages: live grid dashboard, attendee drill-down, event form.
 *
 * The grid is built once from GET /api/v1/events/{id}/progress (compact: see labserver/services/dashboard/room.py)
 * and then only single cells change, by id, from the SSE stream /api/v1/events/{id}/stream.
 * Cell ids: "c<attendee>_<column>". Status codes: w working, f failing, p passed, e checker error, i imported,
 * n not started. */
(function () {
  'use strict';

  const $ = (sel, root) => (root || document).querySelector(sel);
  const S = JSON.parse(($('#i-strings') || { textContent: '{}' }).textContent);
  const CFG = JSON.parse(($('#i-config') || { textContent: '{}' }).textContent);
  // a card the signed-in role may not use is not on the page (services/staff/roles.py): its handlers skip
  const on = (sel, type, fn) => { const el = $(sel); if (el) el.addEventListener(type, fn); };
  const esc = (s) => String(s == null ? '' : s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

  async function api(method, url, body) {
    const opts = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
    if (body !== undefined) { opts.headers['Content-Type'] = 'application/json'; opts.body = JSON.stringify(body); }
    const resp = await fetch(url, opts);
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
    if (!resp.ok) {
      const d = data && data.detail;
      throw new Error(typeof d === 'string' ? d : (d && d.message) || resp.statusText);
    }
    return data;
  }

  function dur(s) {
    if (s == null || s < 0) return '';
    s = Math.round(s);
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm';
    const m = Math.floor((s % 3600) / 60);
    return Math.floor(s / 3600) + 'h' + (m < 10 ? '0' : '') + m;
  }

  function fmt(template, values) {
    return template.replace(/\{(\w+)\}/g, (_, k) => (k in values ? values[k] : ''));
  }

  function throttle(fn, ms) {
    let timer = null;
    return function () {
      if (timer) return;
      timer = setTimeout(() => { timer = null; fn(); }, ms);
    };
  }

  const STATUS_NAME = { w: S.working, f: S.failing, p: S.passed, e: S.error, i: S.imported, n: S.not_started };

  /* ------------------------------------------------------------------------------------------ */
  function dashboard() {
    const eventId = CFG.event;
    const table = $('#grid');
    const styleEl = document.createElement('style');
    document.head.appendChild(styleEl);
    let G = null;            // the grid payload
    let skew = 0;            // client epoch - server epoch (s)
    const rows = new Map();  // attendee id -> {id, name, env, cells: [], tr, stuck, hand}
    let counts = [];         // per column {w,f,p,e}
    let colLab = [];         // column -> lab index
    let stuckMap = new Map();
    let hands = new Map();   // attendee id -> help item

    const nowRel = () => Date.now() / 1000 - skew - G.base;

    function cellHTML(c) {
      // c = [status, attempts, t0, t1]
      if (!c || c[0] === 'n') return '';
      const st = c[0];
      const sym = st === 'p' ? '✓' : st === 'i' ? '⇩' : st === 'f' ? '✗' + c[1] : st === 'e' ? '!' + (c[1] > 1 ? c[1] : '') : '•';
      const t = c[3] != null ? c[3] - c[2] : nowRel() - c[2];
      return '<b>' + sym + '</b><small>' + dur(t) + '</small>';
    }

    function cellTitle(row, col, c) {
      const [lab, step] = G.columns[col];
      let t = row.name + ' · ' + lab + ' / ' + step + ' · ' + STATUS_NAME[c ? c[0] : 'n'];
      if (c && c[0] !== 'n') {
        t += ' · ' + S.attempts + ' ' + c[1] + ' · ' + S.time + ' ' + dur(c[3] != null ? c[3] - c[2] : nowRel() - c[2]);
      }
      return t;
    }

    function rowHTML(row) {
      let h = '<tr id="r' + row.id + '" data-a="' + row.id + '"><th class="name" scope="row">' +
        '<span class="env-dot" data-env="' + esc(row.env) + '" title="' + esc(row.env) + '"></span>' +
        '<a href="/instructor/events/' + eventId + '/attendees/' + row.id + '">' + esc(row.name) + '</a>' +
        '<span class="flags"></span><span class="done" id="d' + row.id + '"></span></th>';
      for (let col = 0; col < G.columns.length; col++) {
        const c = row.cells[col];
        const st = c ? c[0] : 'n';
        h += '<td id="c' + row.id + '_' + col + '" class="cell s-' + st + ' L' + colLab[col] + '">' + cellHTML(c) + '</td>';
      }
      return h + '</tr>';
    }

    function passedCount(row) {
      let n = 0;
      for (const c of row.cells) if (c && c[0] === 'p') n++;
      return n;
    }

    function build(data) {
      const t0 = performance.now();
      G = data;
      skew = Date.now() / 1000 - (G.base + G.now);
      rows.clear();
      colLab = [];
      G.labs.forEach((lab, li) => lab.steps.forEach(() => colLab.push(li)));
      counts = G.columns.map(() => ({ w: 0, f: 0, p: 0, e: 0 }));
      for (const [id, name, env] of G.attendees) rows.set(id, { id, name, env, cells: new Array(G.columns.length).fill(null) });
      for (const [a, col, st, n, t0, t1] of G.cells) {
        const row = rows.get(a);
        if (!row) continue;
        row.cells[col] = [st, n, t0, t1];
        counts[col][st]++;
      }
      // header: lab groups, step numbers, summary bars
      let h1 = '<tr class="labs"><th class="corner" rowspan="3">' + esc(S.attendees) + '</th>';
      let h2 = '<tr class="steps">';
      let h3 = '<tr class="sums">';
      let col = 0;
      G.labs.forEach((lab, li) => {
        h1 += '<th colspan="' + lab.steps.length + '" class="L' + li + '" title="' + esc(lab.id) + '">' + esc(lab.title) + '</th>';
        lab.steps.forEach(([sid, title], si) => {
          const locked = lab.unlocked != null && si >= lab.unlocked;
          h2 += '<th class="L' + li + (locked ? ' locked' : '') + '" title="' + esc(title) + '" data-col="' + col + '">' + (si + 1) + '</th>';
          h3 += '<th class="L' + li + ' sum" id="s' + col + '"></th>';
          col++;
        });
      });
      let body = '';
      for (const row of rows.values()) body += rowHTML(row);
      table.innerHTML = '<thead>' + h1 + '</tr>' + h2 + '</tr>' + h3 + '</tr></thead><tbody id="grid-body">' + body + '</tbody>';
      for (const row of rows.values()) { row.tr = document.getElementById('r' + row.id); updateDone(row); }
      for (let c = 0; c < G.columns.length; c++) updateSum(c);
      $('#attendee-count').textContent = rows.size;
      decorate();
      apply();
      funnel();
      table.dataset.ready = '1';
      table.dataset.buildMs = String(Math.round(performance.now() - t0));  // read by bench/dashboard.py
    }

    function updateDone(row) {
      const el = document.getElementById('d' + row.id);
      if (el) el.textContent = passedCount(row) + '/' + G.columns.length;
    }

    function updateSum(col) {
      const el = document.getElementById('s' + col);
      if (!el) return;
      const n = rows.size || 1;
      const k = counts[col];
      el.innerHTML = '<div class="bar" title="' + esc(S.passed) + ' ' + k.p + ' · ' + esc(S.failing) + ' ' + k.f +
        ' · ' + esc(S.working) + ' ' + k.w + ' · ' + esc(S.error) + ' ' + k.e + '">' +
        '<i class="p" style="height:' + (100 * k.p / n) + '%"></i><i class="f" style="height:' + (100 * k.f / n) + '%"></i>' +
        '<i class="w" style="height:' + (100 * k.w / n) + '%"></i></div><span>' + k.p + '</span>';
    }

    function setCell(a, col, st, n, t0, t1) {
      const row = rows.get(a);
      if (!row) return false;
      const old = row.cells[col];
      if (old) counts[col][old[0]]--;
      const c = st === 'n' ? null : [st, n, t0, t1];
      row.cells[col] = c;
      if (c) counts[col][st]++;
      const td = document.getElementById('c' + a + '_' + col);
      if (td) {
        td.className = 'cell s-' + (c ? st : 'n') + ' L' + colLab[col];
        td.innerHTML = cellHTML(c);
        td.classList.add('flash');
      }
      updateSum(col);
      updateDone(row);
      return true;
    }

    function addRow(data) {
      // a one-attendee grid payload (?attendee=)
      for (const [id, name, env] of data.attendees) {
        if (rows.has(id)) continue;
        const row = { id, name, env, cells: new Array(G.columns.length).fill(null) };
        rows.set(id, row);
        $('#grid-body').insertAdjacentHTML('beforeend', rowHTML(row));
        row.tr = document.getElementById('r' + id);
      }
      for (const [a, col, st, n, t0, t1] of data.cells) setCell(a, col, st, n, t0, t1);
      $('#attendee-count').textContent = rows.size;
      apply();
    }

    const pendingRows = new Set();
    async function fetchRow(a) {
      if (pendingRows.has(a)) return;
      pendingRows.add(a);
      try { addRow(await api('GET', '/api/v1/events/' + eventId + '/progress?attendee=' + a)); } finally { pendingRows.delete(a); }
    }

    // -- filter and sort -----------------------------------------------------------------------
    function apply() {
      if (!G) return;
      const labSel = $('#f-lab').value;
      const li = labSel ? G.labs.findIndex((l) => l.id === labSel) : -1;
      styleEl.textContent = li < 0 ? '' : G.labs.map((_, i) => (i === li ? '' : '#grid .L' + i + '{display:none}')).join('');
      const status = $('#f-status').value;
      const q = $('#f-name').value.trim().toLowerCase();
      const inLab = (col) => li < 0 || colLab[col] === li;
      let shown = 0;
      for (const row of rows.values()) {
        let ok = !q || row.name.toLowerCase().includes(q);
        if (ok && status) {
          const cells = row.cells.filter((c, col) => inLab(col));
          if (status === 'f' || status === 'e') ok = cells.some((c) => c && c[0] === status);
          else if (status === 'stuck') ok = stuckMap.has(row.id);
          else if (status === 'help') ok = hands.has(row.id);
          else if (status === 'done') ok = cells.length > 0 && cells.every((c) => c && c[0] === 'p');
          else if (status === 'idle') ok = cells.every((c) => !c);
        }
        row.tr.hidden = !ok;
        if (ok) shown++;
      }
      $('#grid-shown').textContent = shown + ' / ' + rows.size;
      sort();
    }

    function sort() {
      const key = $('#f-sort').value;
      const list = Array.from(rows.values());
      const prog = (r) => passedCount(r);
      const cmp = {
        name: (a, b) => a.name.localeCompare(b.name),
        progress: (a, b) => prog(a) - prog(b) || a.name.localeCompare(b.name),
        'progress-desc': (a, b) => prog(b) - prog(a) || a.name.localeCompare(b.name),
        stuck: (a, b) => (stuckMap.has(b.id) - stuckMap.has(a.id)) || (hands.has(b.id) - hands.has(a.id)) || a.name.localeCompare(b.name),
        joined: (a, b) => a.id - b.id,
      }[key] || ((a, b) => a.id - b.id);
      list.sort(cmp);
      const body = $('#grid-body');
      let prev = null;
      for (const row of list) {   // move only rows that are out of place
        const want = prev ? prev.tr.nextSibling : body.firstChild;
        if (want !== row.tr) body.insertBefore(row.tr, want);
        prev = row;
      }
    }
    ['#f-lab', '#f-status', '#f-sort'].forEach((s) => $(s).addEventListener('change', apply));
    $('#f-name').addEventListener('input', throttle(apply, 150));

    // -- stuck, hands: row decorations ---------------------------------------------------------
    function decorate() {
      for (const row of rows.values()) {
        if (!row.tr) continue;
        const flag = stuckMap.get(row.id);
        const hand = hands.get(row.id);
        row.tr.classList.toggle('stuck', !!flag);
        row.tr.classList.toggle('hand', !!hand);
        const el = row.tr.querySelector('.flags');
        el.textContent = (hand ? '✋' : '') + (flag ? '⚑' : '');
        el.title = flag ? stuckText(flag) : '';
      }
      // filters and the sort that depend on flags follow them
      if (['stuck', 'help'].includes($('#f-status').value) || $('#f-sort').value === 'stuck') apply();
    }

    function stuckText(f) {
      const parts = [];
      if (f.reasons.includes('slow')) parts.push(fmt(S.slow, { on: dur(f.seconds_on_step), typ: dur(f.typical_s) }));
      if (f.reasons.includes('failing')) parts.push(fmt(S.failing_n, { n: f.failures_in_a_row }));
      return parts.join('; ');
    }

    async function loadStuck() {
      const list = await api('GET', '/api/v1/events/' + eventId + '/stuck');
      stuckMap = new Map(list.map((f) => [f.attendee_id, f]));
      $('#stuck-count').textContent = list.length;
      $('#stuck-list').innerHTML = list.length ? list.map((f) =>
        '<li data-a="' + f.attendee_id + '"><a href="/instructor/events/' + eventId + '/attendees/' + f.attendee_id + '">' + esc(f.name) + '</a> ' +
        '<span class="muted">' + esc(f.lab) + ' / ' + esc(f.step) + '</span><br><span class="why">' + esc(stuckText(f)) + '</span></li>').join('')
        : '<li class="muted">' + esc(S.no_stuck) + '</li>';
      decorate();
    }
    const loadStuckSoon = throttle(() => loadStuck().catch(() => {}), 10000);

    // suspicious joins (services/joining/join_watch.py): only the joins with a reason, each with Remove
    async function loadJoins() {
      const list = (await api('GET', '/api/v1/events/' + eventId + '/joins')).filter((j) => j.reasons.length);
      $('#joins-count').textContent = list.length;
      const why = (j) => j.reasons.map((r) => r === 'same-address' ? fmt(S.same_address, { n: j.same_address }) : S[r] || r).join(' · ');
      $('#joins-list').innerHTML = list.length ? list.map((j) =>
        '<li data-a="' + j.id + '" data-name="' + esc(j.name) + '"><a href="/instructor/events/' + eventId + '/attendees/' + j.id + '">' + esc(j.name) + '</a> ' +
        '<span class="muted small">' + esc(j.user_agent || '?') + '</span><br><span class="why">' + esc(why(j)) + '</span> ' +
        ((CFG.perms || []).includes('remove-attendee') ? '<button type="button" data-act="remove">' + esc(S.remove) + '</button>' : '') + '</li>').join('')
        : '<li class="muted">' + esc(S.no_joins) + '</li>';
    }
    $('#joins-list').addEventListener('click', async (ev) => {
      const btn = ev.target.closest('button[data-act="remove"]');
      if (!btn) return;
      const li = btn.closest('[data-a]');
      if (!window.confirm(fmt(S.remove_confirm, { name: li.dataset.name }))) return;
      btn.disabled = true;
      try { await api('DELETE', '/api/v1/events/' + eventId + '/attendees/' + li.dataset.a); } catch (e) { btn.disabled = false; return; }
      await loadJoins();
      loadGrid();
    });
    setInterval(() => loadJoins().catch(() => {}), 30000);  // new joins arrive without a live event

    async function loadHelp() {
      const list = await api('GET', '/api/v1/events/' + eventId + '/help');
      hands = new Map(list.map((h) => [h.attendee_id, h]));
      $('#help-count').textContent = list.length;
      const now = Date.now();
      $('#help-queue').innerHTML = list.length ? list.map((h) =>
        '<li class="help-item ' + esc(h.state) + '" data-help="' + h.id + '" data-a="' + h.attendee_id + '">' +
        '<a href="/instructor/events/' + eventId + '/attendees/' + h.attendee_id + '">' + esc(h.name) + '</a> ' +
        '<span class="muted">' + esc(h.lab) + (h.step ? ' / ' + esc(h.step) : '') + '</span> ' +
        '<span class="waiting" data-since="' + esc(h.created_at) + '">' + esc(S.waiting) + ' ' + dur(h.waiting_s) + '</span>' +
        (h.note ? '<div class="note">' + esc(h.note) + '</div>' : '') +
        '<div class="row">' + (h.state === 'claimed' ? '<span class="muted small">' + esc(S.claimed_by) + ' ' + esc(h.claimed_by) + '</span>' :
          '<button type="button" data-act="claim">' + esc(S.claim) + '</button>') +
        (h.lab ? '<button type="button" data-act="share" data-lab="' + esc(h.lab) + '" title="' + esc($('#help-card').dataset.shareTitle) + '">' + esc($('#help-card').dataset.share) + '</button>' : '') +
        '<button type="button" data-act="resolve" class="primary">' + esc(S.resolve) + '</button></div></li>').join('')
        : '<li class="muted">' + esc(S.no_hands) + '</li>';
      decorate();
      void now;
    }
    $('#help-queue').addEventListener('click', async (ev) => {
      const btn = ev.target.closest('button[data-act]');
      if (!btn) return;
      const li = btn.closest('[data-help]');
      btn.disabled = true;
      try { await api('POST', '/api/v1/events/' + eventId + '/help/' + li.dataset.help + '/' + btn.dataset.act); }
      catch (e) { alert(S.failed + ' ' + e.message); }
      if (btn.dataset.act === 'share') {  // the shared terminal is on the drill-down, writable once accepted
        location.assign('/instructor/events/' + eventId + '/attendees/' + li.dataset.a + '?lab=' + encodeURIComponent(btn.dataset.lab));
        return;
      }
      await loadHelp();
    });

    // -- broadcast, pacing ---------------------------------------------------------------------
    async function loadAnnouncements() {
      const list = await api('GET', '/api/v1/events/' + eventId + '/announcements');
      $('#announcements').innerHTML = list.slice(0, 5).map((a) =>
        '<li><span class="muted">' + esc(new Date(a.created_at).toLocaleTimeString()) + ' ' + esc(a.author) + ':</span> ' + esc(a.message) + '</li>').join('');
    }
    on('#broadcast-form', 'submit', async (ev) => {
      ev.preventDefault();
      const text = $('#broadcast-text');
      try {
        await api('POST', '/api/v1/events/' + eventId + '/announcements', { message: text.value });
        text.value = '';
        $('#broadcast-status').textContent = S.sent;
      } catch (e) { $('#broadcast-status').textContent = S.failed + ' ' + e.message; }
    });

    // -- environments: warm pool size, stop all ----------------------------------------------------
    on('#warm-form', 'submit', async (ev) => {
      ev.preventDefault();
      const v = $('#warm-size').value;
      try {
        await api('PATCH', '/api/v1/events/' + eventId, { warm_pool: v === '' ? null : Number(v) });
        $('#environments-status').textContent = S.saved;
      } catch (e) { $('#environments-status').textContent = S.failed + ' ' + e.message; }
    });
    on('#stop-all', 'click', async () => {
      if (!confirm(S.confirm_stop_all)) return;
      $('#environments-status').textContent = '…';
      try {
        const res = await api('POST', '/api/v1/events/' + eventId + '/stop-all');
        const failed = Object.keys(res.failed || {}).length;
        $('#environments-status').textContent = fmt(S.stopped_n, { n: res.stopped.length }) +
          (failed ? ' ' + fmt(S.not_stopped_n, { n: failed }) : '');
      } catch (e) { $('#environments-status').textContent = S.failed + ' ' + e.message; }
    });
    // -- personal join codes (services/joining/seats.py) ---------------------------------------------------
    const showSeats = (c) => { $('#seats-count').textContent = c.used + ' / ' + c.total; };
    on('#seats-form', 'submit', async (ev) => {
      ev.preventDefault();
      try {
        const res = await api('POST', '/api/v1/events/' + eventId + '/seats', { count: Number($('#seats-n').value) });
        const box = $('#seats-codes');
        box.value = (box.value ? box.value + '\n' : '') + res.codes.join('\n');
        box.hidden = false;
        box.select();
        showSeats(res);
        $('#seats-status').textContent = fmt(S.seats_made, { n: res.codes.length });
      } catch (e) { $('#seats-status').textContent = S.failed + ' ' + e.message; }
    });
    on('#seats-only', 'change', async (ev) => {
      try {
        await api('PATCH', '/api/v1/events/' + eventId, { seats_only: ev.target.checked });
        $('#seats-status').textContent = S.saved;
      } catch (e) {
        ev.target.checked = !ev.target.checked;
        $('#seats-status').textContent = S.failed + ' ' + e.message;
      }
    });
    if ($('#seats-count')) setInterval(async () => { try { showSeats(await api('GET', '/api/v1/events/' + eventId + '/seats')); } catch (e) { /* next time */ } }, 15000);

    const admission = $('#admission-form') || document.createElement('form');  // absent: not an organiser of every event
    const showAdmission = (a) => {
      if (document.activeElement !== admission.limit) admission.limit.value = a.limit;
      $('#admission-starting').textContent = a.starting;
      $('#admission-queued').textContent = a.queued;
    };
    const loadAdmission = async () => { try { showAdmission(await api('GET', '/api/v1/admission')); } catch (e) { /* shown on the next try */ } };
    admission.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        showAdmission(await api('PUT', '/api/v1/admission', { limit: Number(admission.limit.value) }));
        $('#admission-status').textContent = S.saved;
      } catch (e) { $('#admission-status').textContent = S.failed + ' ' + e.message; }
    });
    if ($('#admission-form')) {
      loadAdmission();
      setInterval(loadAdmission, 5000);
    }

    document.querySelectorAll('.pace-form').forEach((form) => {
      const send = async (value) => {
        try {
          await api('PUT', '/api/v1/events/' + eventId + '/pace', { lab: form.dataset.lab, unlocked: value === '' ? null : Number(value) });
          $('#pace-status').textContent = S.saved;
        } catch (e) { $('#pace-status').textContent = S.failed + ' ' + e.message; }
      };
      form.addEventListener('submit', (ev) => { ev.preventDefault(); send(form.unlocked.value); });
      form.querySelector('.advance').addEventListener('click', () => {
        const v = form.unlocked.value;
        if (v === '') return;
        const max = form.unlocked.options.length - 2;
        const next = Number(v) + 1;
        send(next > max ? '' : String(next));
      });
    });

    function onPace(d) {
      const form = document.querySelector('.pace-form[data-lab="' + CSS.escape(d.lab) + '"]');
      if (form) form.unlocked.value = d.unlocked >= d.total ? '' : String(d.unlocked);
      const li = G ? G.labs.findIndex((l) => l.id === d.lab) : -1;
      if (li >= 0) {
        G.labs[li].unlocked = d.unlocked >= d.total ? null : d.unlocked;
        table.querySelectorAll('tr.steps th.L' + li).forEach((th, si) => th.classList.toggle('locked', si >= d.unlocked));
      }
    }

    // -- funnel and chart ----------------------------------------------------------------------
    function funnel() {
      if (!G) return;
      const n = Math.max(1, rows.size);
      let html = '';
      let col = 0;
      G.labs.forEach((lab) => {
        const start = col;
        const reached = lab.steps.map(() => 0);
        for (const row of rows.values()) {
          let last = -1;
          for (let i = 0; i < lab.steps.length; i++) { const c = row.cells[start + i]; if (c && c[0] === 'p') last = i; }
          for (let i = 0; i <= last; i++) reached[i]++;
        }
        html += '<div class="funnel-lab"><h3>' + esc(lab.title) + '</h3>' + lab.steps.map(([sid, title], i) =>
          '<div class="frow" data-step="' + esc(lab.id + '/' + sid) + '"><span class="flabel" title="' + esc(title) + '">' + (i + 1) + '. ' + esc(title) + '</span>' +
          '<span class="fbar"><i style="width:' + (100 * reached[i] / n) + '%"></i></span><span class="fnum">' + reached[i] + '</span></div>').join('') + '</div>';
        col += lab.steps.length;
      });
      $('#funnel').innerHTML = html;
    }
    const funnelSoon = throttle(funnel, 1000);

    async function loadChart() {
      const lab = $('#chart-lab') ? $('#chart-lab').value : '';
      const resp = await fetch('/api/v1/events/' + eventId + '/completion.svg?lab=' + encodeURIComponent(lab), { credentials: 'same-origin' });
      if (resp.ok) $('#chart').innerHTML = await resp.text();
    }
    const chartSoon = throttle(() => loadChart().catch(() => {}), 5000);
    if ($('#chart-lab')) $('#chart-lab').addEventListener('change', loadChart);
    if ($('#chart-refresh')) $('#chart-refresh').addEventListener('click', loadChart);

    // -- live ----------------------------------------------------------------------------------
    async function loadGrid() {
      build(await api('GET', '/api/v1/events/' + eventId + '/progress'));
    }

    let readyOnce = false;
    function connect() {
      const live = $('#live');
      const es = new EventSource('/api/v1/events/' + eventId + '/stream');
      es.addEventListener('ready', () => {
        live.dataset.state = 'live';
        live.textContent = S.live;
        document.body.dataset.live = 'ready';
        if (readyOnce) { loadGrid(); loadHelp(); loadStuck(); }  // caught up after a reconnect
        loadJoins().catch(() => {});
        readyOnce = true;
      });
      es.onerror = () => { live.dataset.state = 'offline'; live.textContent = S.offline; document.body.dataset.live = 'offline'; };
      es.addEventListener('cell', (m) => {
        const d = JSON.parse(m.data);
        const [a, col, st, n, t0, t1] = d.cell;
        if (!G) return;
        const t = performance.now();
        if (!setCell(a, col, st, n, t0, t1)) { fetchRow(a); return; }
        table.dataset.lastDeltaMs = String(performance.now() - t);  // read by bench/dashboard.py
        if (d.at) table.dataset.lastDeltaLag = String(Date.now() / 1000 - d.at);
        funnelSoon();
        loadStuckSoon();
        if (st === 'p') chartSoon();
      });
      es.addEventListener('run', (m) => {
        const d = JSON.parse(m.data);
        const td = document.getElementById('c' + d.a + '_' + d.c);
        if (td) td.classList.add('running');
      });
      es.addEventListener('env', (m) => {
        const d = JSON.parse(m.data);
        const row = rows.get(d.a);
        if (!row) { if (G) fetchRow(d.a); return; }
        row.env = d.state;
        const dot = row.tr && row.tr.querySelector('.env-dot');
        if (dot) { dot.dataset.env = d.state; dot.title = d.state; }
      });
      es.addEventListener('help', () => { loadHelp(); document.dispatchEvent(new Event('labserver:changed')); });
      es.addEventListener('announcement', () => loadAnnouncements());
      es.addEventListener('pace', (m) => onPace(JSON.parse(m.data)));
      es.addEventListener('event.status', (m) => { $('#event-status').textContent = JSON.parse(m.data).status; });
      es.addEventListener('resync', () => loadGrid());
    }

    function tick() {   // times of unfinished cells and waiting hands move on
      if (!G) return;
      for (const row of rows.values()) {
        row.cells.forEach((c, col) => {
          if (c && c[3] == null) {
            const td = document.getElementById('c' + row.id + '_' + col);
            const small = td && td.querySelector('small');
            if (small) small.textContent = dur(nowRel() - c[2]);
          }
        });
      }
      document.querySelectorAll('#help-queue .waiting').forEach((el) => {
        el.textContent = S.waiting + ' ' + dur((Date.now() - Date.parse(el.dataset.since)) / 1000);
      });
    }

    table.addEventListener('mouseover', (ev) => {   // titles built lazily: 12000 cells stay light
      const td = ev.target.closest('td.cell');
      if (!td || !G) return;
      const m = /^c(\d+)_(\d+)$/.exec(td.id);
      const row = m && rows.get(Number(m[1]));
      if (row) td.title = cellTitle(row, Number(m[2]), row.cells[Number(m[2])]);
    });
    table.addEventListener('click', (ev) => {
      const td = ev.target.closest('td.cell');
      const m = td && /^c(\d+)_(\d+)$/.exec(td.id);
      if (m) location.href = '/instructor/events/' + eventId + '/attendees/' + m[1] + '?lab=' + encodeURIComponent(G.columns[Number(m[2])][0]);
    });

    connect();
    loadGrid().then(() => Promise.all([loadHelp(), loadStuck(), loadAnnouncements(), loadChart()]))
      .catch((e) => { table.innerHTML = '<tbody><tr><td class="error">' + esc(e.message) + '</td></tr></tbody>'; });
    setInterval(tick, 15000);
    setInterval(() => loadStuck().catch(() => {}), 30000);
    setInterval(() => loadChart().catch(() => {}), 60000);
  }

  /* ------------------------------------------------------------------------------------------ */
  function drill() {
    const eventId = CFG.event;
    const aid = CFG.attendee;
    const labs = JSON.parse($('#i-labs').textContent);
    const params = new URLSearchParams(location.search);
    let envId = CFG.env_id;
    const status = (t) => { $('#act-status').textContent = t; };

    const actLab = $('#act-lab');
    const actStep = $('#act-step');
    function fillSteps() {
      const lab = labs.find((l) => l.id === actLab.value);
      actStep.innerHTML = lab ? lab.steps.map((s, i) => '<option value="' + esc(s.id) + '">' + (i + 1) + '. ' + esc(s.title) + '</option>').join('') : '';
    }
    if (params.get('lab')) { actLab.value = params.get('lab'); }
    actLab.addEventListener('change', fillSteps);
    fillSteps();

    function renderEnv(env) {
      envId = env.id || envId;
      $('#env-state').textContent = env.state;
      $('#env-state').dataset.state = env.state;
      $('#env-node').textContent = env.node || '—';
      $('#env-device').textContent = env.state === 'none' ? '—' : (env.emulated ? S.emulated : S.card + ' ' + env.device);
    }

    function renderRuns(runs) {
      if (!runs.length) { $('#runs').innerHTML = '<p class="muted">' + esc(S.no_runs) + '</p>'; return; }
      $('#runs').innerHTML = runs.map((r) =>
        '<details class="run st-' + esc(r.status) + '" data-run="' + r.id + '"><summary><span class="badge ' + esc(r.status) + '">' + esc(r.status) + '</span> ' +
        '<b>' + esc(r.lab) + ' / ' + esc(r.step) + '</b> <span class="muted">' + esc(new Date(r.created_at).toLocaleString()) + ' · ' + r.duration_s + 's</span> ' +
        '<span class="msg">' + esc(r.message.split('\n')[0].slice(0, 160)) + '</span></summary>' +
        '<h4>' + esc(S.message) + '</h4><pre class="out">' + esc(r.message) + '</pre>' +
        (r.hints && r.hints.length ? '<h4>' + esc(S.hints) + '</h4><ul>' + r.hints.map((h) => '<li>' + esc(h) + '</li>').join('') + '</ul>' : '') +
        (r.metrics && Object.keys(r.metrics).length ? '<pre class="metrics">' + esc(JSON.stringify(r.metrics, null, 1)) + '</pre>' : '') +
        '<h4>' + esc(S.log) + (r.exit_code != null ? ' (exit ' + r.exit_code + ')' : '') + '</h4><pre class="out log">' + esc(r.log) + (r.log_truncated ? '\n…' : '') + '</pre></details>').join('');
    }

    async function load() {
      const d = await api('GET', '/api/v1/events/' + eventId + '/attendees/' + aid);
      renderEnv(d.environment);
      renderRuns(d.runs);
      const f = d.stuck[0];
      $('#stuck-flag').textContent = f ? '⚑ ' + f.lab + ' / ' + f.step + ': ' + f.reasons.join(', ') : '';
      return d;
    }
    const loadSoon = throttle(() => load().catch(() => {}), 500);

    async function act(path, body, confirmText) {
      if (confirmText && !confirm(confirmText)) return;
      status('…');
      try {
        if (!envId && path.startsWith('env:')) await load();
        const url = path.startsWith('env:') ? '/api/v1/environments/' + envId + '/' + path.slice(4) : path;
        const res = await api('POST', url, body);
        status(S.done + (res && res.files ? ' ' + res.files.join(', ') : '') + (res && res.backup ? ' → ' + res.backup : ''));
        await load();
        connectTerm();
      } catch (e) { status(S.failed + ' ' + e.message); }
    }
    on('#act-reset', 'click', () => act('env:reset', { lab: actLab.value }, S.confirm_reset));
    on('#act-restart', 'click', () => act('env:restart', undefined, null));
    on('#act-recreate', 'click', () => act('env:recreate', undefined, S.confirm_recreate));
    on('#act-reveal', 'click', () => act('/api/v1/events/' + eventId + '/attendees/' + aid + '/reveal', { lab: actLab.value, step: actStep.value }, S.confirm_reveal));

    // the terminal view: read-only, or typing on a share the attendee accepted (help with consent)
    const box = $('#term');
    const card = $('.term-card');
    const term = new Terminal({ cursorBlink: false, disableStdin: true, convertEol: false, fontSize: 13, rows: 24 });
    const encoder = new TextEncoder();
    let share = null;        // this attendee's asked or active share (GET /api/v1/events/{id}/shares)
    let writable = false;    // the socket open now types (an active share)
    term.onData((data) => { if (writable && ws && ws.readyState === WebSocket.OPEN) ws.send(encoder.encode(data)); });
    function renderShare() {
      const state = share ? share.state : 'none';
      card.dataset.shareState = state;
      document.body.dataset.share = state;
      $('#term-title').textContent = state === 'active' ? card.dataset.sShared : state === 'asked' ? card.dataset.sAsked : card.dataset.sReadonly;
      $('#share-stop').hidden = state === 'none';
    }
    async function loadShare() {
      const list = await api('GET', '/api/v1/events/' + eventId + '/shares');
      const before = share ? share.id + share.state : '';
      share = list.find((x) => x.attendee_id === aid) || null;
      renderShare();
      if ((share ? share.id + share.state : '') !== before) connectTerm();
    }
    $('#share-stop').addEventListener('click', async () => {
      if (share) await api('DELETE', '/api/v1/events/' + eventId + '/shares/' + share.id).catch(() => {});
      await loadShare();
    });
    const fit = new FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(box);
    try { fit.fit(); } catch (e) { /* hidden */ }
    window.term = term;
    let ws = null;
    let retry = null;
    function connectTerm() {
      if (retry) { clearTimeout(retry); retry = null; }
      if (ws) { ws.onclose = null; ws.close(); ws = null; }
      if (!envId) { $('#term-status').textContent = S.no_terminal; retry = setTimeout(() => load().then(connectTerm, connectTerm), 3000); return; }
      writable = !!(share && share.state === 'active');
      term.options.disableStdin = !writable;
      const lab = writable ? share.lab : $('#term-lab').value;
      const proto = location.protocol === 'https:' ? 'wss' : 'ws';
      ws = new WebSocket(proto + '://' + location.host + '/api/v1/environments/' + encodeURIComponent(envId) + '/terminal?readonly=' + (writable ? '0' : '1') + (lab ? '&lab=' + encodeURIComponent(lab) : ''));
      box.dataset.writable = String(writable);
      ws.binaryType = 'arraybuffer';
      let first = true;
      ws.onopen = () => { box.dataset.ws = 'open'; };
      ws.onmessage = (e) => {
        if (typeof e.data === 'string') return;  // a control frame ({"ready": true}), not output
        const bytes = new Uint8Array(e.data);
        if (first) { term.reset(); first = false; }   // the server replays the scrollback on attach
        term.write(bytes);
        $('#term-status').textContent = S.live;
      };
      ws.onclose = (e) => {
        box.dataset.ws = 'closed';
        $('#term-status').textContent = S.offline;
        if (e.code === 4403 && writable) { writable = false; loadShare().catch(() => {}); }  // the share ended
        retry = setTimeout(connectTerm, 2000);
      };
    }
    if (params.get('term') && labs.some((l) => l.id === params.get('term'))) $('#term-lab').value = params.get('term');  // from the gallery
    $('#term-lab').addEventListener('change', connectTerm);
    window.addEventListener('resize', () => { try { fit.fit(); } catch (e) { /* ignore */ } });

    const es = new EventSource('/api/v1/events/' + eventId + '/stream');
    es.addEventListener('ready', () => { document.body.dataset.live = 'ready'; });
    ['cell', 'env', 'solution.revealed', 'lab.reset'].forEach((kind) => es.addEventListener(kind, (m) => {
      const d = JSON.parse(m.data);
      const a = d.cell ? d.cell[0] : d.a;
      if (a !== aid) return;
      loadSoon();
      if (kind === 'env' && d.state === 'ready' && box.dataset.ws !== 'open') connectTerm();
    }));

    es.addEventListener('help', (m) => {
      const d = JSON.parse(m.data);
      if (d.a === aid && String(d.kind).startsWith('share.')) loadShare().catch(() => {});
    });

    load().then(() => loadShare()).then(connectTerm, connectTerm);
  }

  /* ------------------------------------------------------------------------------------------ */
  function eventForm() {
    const field = $('#labs-field');
    document.querySelectorAll('.lab-picker .chip').forEach((chip) => chip.addEventListener('click', () => {
      const list = field.value.split('\n').map((s) => s.trim()).filter(Boolean);
      if (!list.includes(chip.dataset.lab)) list.push(chip.dataset.lab);
      field.value = list.join('\n');
    }));
  }

  const page = document.body.dataset.page;
  if (page === 'instructor-dashboard') dashboard();
  else if (page === 'instructor-attendee') drill();
  else if (page === 'instructor-event-form') eventForm();
})();
