// Terminal recordings: a list, a player (asciinema-player from npm, /vendor/asciinema-player) and
// a button per marker (each Check press and its result, the start and end of a shared session),
// so "what did they do before step 3 failed" is one click. Used by the attendee's lab page (their
// own recordings) and the instructor's drill-down (one attendee's): any element with
// data-recordings-url is filled when it is first shown (or at once with data-recordings-eager).
// Strings come from the element's data-strings (JSON), so this module needs no page's catalog.

/* global AsciinemaPlayer */

function h(tag, attrs = {}, text = '') {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

function fmtTime(s) {
  const m = Math.floor(s / 60);
  const r = Math.floor(s % 60);
  return `${m}:${r < 10 ? '0' : ''}${r}`;
}

/** The marker events of an asciicast v2 text: [{time, label}]. */
export function markersOf(text) {
  const out = [];
  for (const line of text.split('\n').slice(1)) {
    if (!line.includes('"m"')) continue;
    try {
      const ev = JSON.parse(line);
      if (Array.isArray(ev) && ev[1] === 'm') out.push({ time: Number(ev[0]), label: String(ev[2]) });
    } catch (err) { /* a partial last line while the session still records */ }
  }
  return out;
}

export class RecordingsPanel {
  constructor(root) {
    this.root = root;
    this.url = root.dataset.recordingsUrl;
    this.S = JSON.parse(root.dataset.strings || '{}');
    this.list = root.querySelector('.recordings-list');
    this.stage = root.querySelector('.recordings-stage');
    this.player = null;
    this.loaded = false;
  }

  async load() {
    this.loaded = true;
    this.list.textContent = this.S.loading || '…';
    const resp = await fetch(this.url, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
    const rows = resp.ok ? await resp.json() : [];
    this.list.textContent = '';
    if (!rows.length) { this.list.append(h('p', { class: 'muted' }, this.S.none || '')); this.root.dataset.state = 'empty'; return; }
    for (const r of rows) {
      const li = h('li', { class: 'recording', 'data-rec': r.id });
      const play = h('button', { type: 'button', class: 'small rec-play' }, `▶ ${r.lab} · ${new Date(r.started_at).toLocaleString()}`);
      play.addEventListener('click', () => this.play(r));
      const save = h('a', { class: 'button small rec-download', href: r.download_url, download: '' }, `⤓ ${this.S.download || 'Download'}`);
      li.append(play, ' ', h('span', { class: 'muted small' }, `${Math.ceil(r.bytes / 1024)} KiB`), ' ', save);
      this.list.append(li);
    }
    this.root.dataset.state = 'listed';
  }

  async play(r) {
    const resp = await fetch(r.url, { credentials: 'same-origin', cache: 'no-store' });
    const text = await resp.text();
    if (this.player) { this.player.dispose(); this.player = null; }
    this.stage.textContent = '';
    const screen = h('div', { class: 'recording-player' });
    const marks = h('ol', { class: 'recording-markers' });
    this.stage.append(screen, marks);
    this.player = AsciinemaPlayer.create({ data: text }, screen, { fit: 'width', idleTimeLimit: 2, terminalFontSize: '13px' });
    window.recordingPlayer = this.player;  // tests read the player's time
    const markers = markersOf(text);
    this.root.dataset.markers = String(markers.length);
    if (!markers.length) marks.append(h('li', { class: 'muted small' }, this.S.no_markers || ''));
    for (const m of markers) {
      const kind = /: (passed)\b/.test(m.label) ? 'passed' : /: (failed|error|timeout)\b/.test(m.label) ? 'failed' : 'mark';
      const b = h('button', { type: 'button', class: `small marker marker-${kind}`, 'data-time': String(m.time) }, `${fmtTime(m.time)} ${m.label}`);
      // a little before the marker, so the commands that led to it are on the screen
      b.addEventListener('click', () => this.player.seek(Math.max(0, m.time - 0.001)).then(() => this.player.play()));
      const li = h('li');
      li.append(b);
      marks.append(li);
    }
    this.root.dataset.state = 'playing';
    this.root.dataset.playing = r.id;
  }
}

export function mountAll() {
  for (const root of document.querySelectorAll('[data-recordings-url]')) {
    if (root.recordings) continue;
    const panel = new RecordingsPanel(root);
    root.recordings = panel;
    if (root.dataset.recordingsEager !== undefined) panel.load();
  }
}

mountAll();
