/* The live gallery (labserver/routes/instructor/gallery.py): one thumbnail per attendee showing the
 * last lines of their terminal, all fed by ONE stream, /api/v1/events/{id}/gallery/stream:
 *   thumbs  {"t": [[attendee, lab, drop, keep, tail], ...]}: lines = old.slice(drop, drop + keep).concat(tail);
 *           lab null = no terminal open (labserver/services/support/gallery.py)
 *   cell / env / help / resync: the grid deltas (labserver/routes/instructor/stream.py), for sorting.
 * Updates are applied once per animation frame, only to the thumbnails that changed and are on screen
 * (a card off screen is drawn when it scrolls into view; the browser skips rendering it meanwhile:
 * content-visibility), so 200 thumbnails stay light. */
(function () {
  'use strict';

  const $ = (sel, root) => (root || document).querySelector(sel);
  const CFG = JSON.parse($('#i-config').textContent);
  const S = JSON.parse($('#g-strings').textContent);
  const eventId = CFG.event;
  const box = $('#gallery');
  const fmt = (t, v) => t.replace(/\{(\w+)\}/g, (_, k) => (k in v ? v[k] : ''));

  async function getJSON(url) {
    const resp = await fetch(url, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (!resp.ok) throw new Error(resp.status + ' ' + resp.statusText);
    return resp.json();
  }

  const cards = new Map();   // attendee id -> {id, name, el, pre, head, lab, lines, cells, stuck, hand}
  let columns = 0;
  let stuck = new Map();
  let hands = new Set();
  const pending = new Map(); // attendee id -> true: thumbnail text to draw on the next frame
  let frameAsked = false;
  const stats = { messages: 0, updates: 0, chars: 0, draws: 0, drawMs: 0, drawMaxMs: 0 };  // read by bench/gallery.py
  window.galleryStats = stats;

  function card(id, name) {
    let c = cards.get(id);
    if (c) { if (name) { c.name = name; c.el.querySelector('.g-name').textContent = name; } return c; }
    const el = document.createElement('a');
    el.className = 'thumb';
    el.id = 't' + id;
    el.dataset.a = String(id);
    el.dataset.term = 'none';
    el.title = S.open_view;
    el.innerHTML = '<div class="g-head"><b class="g-name"></b><span class="g-flags"></span><span class="spacer"></span>' +
      '<span class="g-lab muted"></span><span class="g-prog"></span></div><pre class="g-lines"></pre>';
    el.querySelector('.g-name').textContent = name || ('#' + id);
    c = { id, name: name || '', el, pre: el.querySelector('.g-lines'), lab: null, lines: [], cells: new Map(), visible: false, stale: false };
    c.pre.textContent = S.no_terminal;
    cards.set(id, c);
    seen.observe(el);
    link(c);
    box.appendChild(el);
    return c;
  }

  function link(c) {
    const q = c.lab ? '?lab=' + encodeURIComponent(c.lab) + '&term=' + encodeURIComponent(c.lab) : '';
    c.el.href = '/instructor/events/' + eventId + '/attendees/' + c.id + q;
  }

  const passed = (c) => { let n = 0; for (const s of c.cells.values()) if (s === 'p') n++; return n; };
  const failing = (c) => { let n = 0; for (const s of c.cells.values()) if (s === 'f' || s === 'e') n++; return n; };

  function decorate(c) {
    const f = failing(c);
    c.el.classList.toggle('stuck', stuck.has(c.id));
    c.el.classList.toggle('failing', f > 0);
    c.el.classList.toggle('hand', hands.has(c.id));
    c.el.dataset.passed = String(passed(c));
    c.el.dataset.failing = String(f);
    c.el.querySelector('.g-flags').textContent = (hands.has(c.id) ? '✋' : '') + (stuck.has(c.id) ? ' ⚑' : '') + (f ? ' ✗' + f : '');
    c.el.querySelector('.g-flags').title = [hands.has(c.id) ? S.hand : '', stuck.has(c.id) ? S.stuck : '', f ? fmt(S.failing_n, { n: f }) : ''].filter(Boolean).join(' · ');
    c.el.querySelector('.g-prog').textContent = passed(c) + '/' + columns;
  }

  // -- sort and filter: at most once a second, moving only the cards out of place --------------
  function order() {
    const key = $('#g-sort').value;
    const q = $('#g-name').value.trim().toLowerCase();
    const byName = (a, b) => a.name.localeCompare(b.name) || a.id - b.id;
    const cmp = {
      stuck: (a, b) => (stuck.has(b.id) - stuck.has(a.id)) || (hands.has(b.id) - hands.has(a.id)) || (failing(b) - failing(a)) || byName(a, b),
      failing: (a, b) => (failing(b) - failing(a)) || (stuck.has(b.id) - stuck.has(a.id)) || byName(a, b),
      progress: (a, b) => (passed(a) - passed(b)) || byName(a, b),
      'progress-desc': (a, b) => (passed(b) - passed(a)) || byName(a, b),
      name: byName,
    }[key] || byName;
    const list = Array.from(cards.values()).sort(cmp);
    let prev = null;
    let shown = 0;
    for (const c of list) {
      const ok = !q || c.name.toLowerCase().includes(q);
      c.el.hidden = !ok;
      if (ok) shown++;
      const want = prev ? prev.el.nextSibling : box.firstChild;
      if (want !== c.el) box.insertBefore(c.el, want);
      prev = c;
    }
    $('#g-shown').textContent = shown + ' / ' + cards.size;
    box.dataset.sort = key;
  }
  let orderTimer = null;
  function orderSoon() {
    if (orderTimer) return;
    orderTimer = setTimeout(() => { orderTimer = null; order(); }, 1000);
  }
  $('#g-sort').addEventListener('change', order);
  $('#g-name').addEventListener('input', orderSoon);

  // -- thumbnails ------------------------------------------------------------------------------
  // a thumbnail off screen is drawn when it scrolls into view, not on every update
  const seen = new IntersectionObserver((entries) => {
    for (const e of entries) {
      const c = cards.get(Number(e.target.dataset.a));
      if (!c) continue;
      c.visible = e.isIntersecting;
      if (c.visible && c.stale) { pending.set(c.id, true); if (!frameAsked) { frameAsked = true; requestAnimationFrame(draw); } }
    }
  }, { rootMargin: '200px' });

  function draw() {
    frameAsked = false;
    const t = performance.now();
    for (const id of pending.keys()) {
      const c = cards.get(id);
      if (!c) continue;
      c.stale = !c.visible;
      if (c.stale) continue;
      c.pre.textContent = c.lab == null ? S.no_terminal : c.lines.join('\n');
      c.el.querySelector('.g-lab').textContent = c.lab || '';
    }
    pending.clear();
    const took = performance.now() - t;
    stats.draws++;
    stats.drawMs += took;
    stats.drawMaxMs = Math.max(stats.drawMaxMs, took);
  }

  function onThumbs(d) {
    for (const [id, lab, drop, keep, tail] of d.t) {
      const c = card(id);
      if (lab == null) { c.lab = null; c.lines = []; } else {
        c.lines = (c.lab === lab ? c.lines.slice(drop, drop + keep) : []).concat(tail);
        if (c.lab !== lab) { c.lab = lab; link(c); }
      }
      const term = lab == null ? 'none' : 'open';
      if (c.el.dataset.term !== term) c.el.dataset.term = term;
      pending.set(id, true);
      stats.updates++;
    }
    if (!frameAsked) { frameAsked = true; requestAnimationFrame(draw); }
  }

  // -- the room: names, progress, stuck, hands ------------------------------------------------
  async function loadGrid() {
    const g = await getJSON('/api/v1/events/' + eventId + '/progress');
    columns = g.columns.length;
    const loading = box.querySelector(':scope > p.muted');
    if (loading) loading.remove();
    for (const [id, name] of g.attendees) card(id, name).cells.clear();
    for (const [a, col, st] of g.cells) { const c = cards.get(a); if (c) c.cells.set(col, st); }
    for (const c of cards.values()) decorate(c);
    order();
    box.dataset.ready = '1';
  }
  async function loadStuck() {
    stuck = new Map((await getJSON('/api/v1/events/' + eventId + '/stuck')).map((f) => [f.attendee_id, f]));
    for (const c of cards.values()) decorate(c);
    orderSoon();
  }
  async function loadHands() {
    hands = new Set((await getJSON('/api/v1/events/' + eventId + '/help')).map((h) => h.attendee_id));
    for (const c of cards.values()) decorate(c);
    orderSoon();
  }
  let stuckTimer = null;
  const stuckSoon = () => { if (!stuckTimer) stuckTimer = setTimeout(() => { stuckTimer = null; loadStuck().catch(() => {}); }, 5000); };

  let readyOnce = false;
  function connect() {
    const live = $('#live');
    const es = new EventSource('/api/v1/events/' + eventId + '/gallery/stream');
    es.addEventListener('ready', () => {
      live.dataset.state = 'live';
      document.body.dataset.live = 'ready';
      live.textContent = '';
      if (readyOnce) {  // a new stream sends every open terminal again; the rest have none
        for (const c of cards.values()) { c.lab = null; c.lines = []; c.el.dataset.term = 'none'; pending.set(c.id, true); }
        if (!frameAsked) { frameAsked = true; requestAnimationFrame(draw); }
        loadGrid().catch(() => {});
      }
      readyOnce = true;
    });
    es.onerror = () => { live.dataset.state = 'offline'; document.body.dataset.live = 'offline'; };
    es.addEventListener('thumbs', (m) => { stats.messages++; stats.chars += m.data.length; onThumbs(JSON.parse(m.data)); });
    es.addEventListener('cell', (m) => {
      const [a, col, st] = JSON.parse(m.data).cell;
      const c = cards.get(a);
      if (!c) { loadGrid().catch(() => {}); return; }
      if (st === 'n') c.cells.delete(col); else c.cells.set(col, st);
      decorate(c);
      orderSoon();
      stuckSoon();
    });
    es.addEventListener('env', (m) => { if (!cards.has(JSON.parse(m.data).a)) loadGrid().catch(() => {}); });
    es.addEventListener('help', () => loadHands().catch(() => {}));
    es.addEventListener('resync', () => { loadGrid().catch(() => {}); loadStuck().catch(() => {}); });
  }

  connect();
  loadGrid().then(() => Promise.all([loadStuck(), loadHands()])).catch((e) => {
    box.innerHTML = '<p class="error"></p>';
    box.firstChild.textContent = e.message;
  });
  setInterval(() => loadStuck().catch(() => {}), 30000);
})();
