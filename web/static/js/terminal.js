// The lab's terminal: xterm.js + fit addon over the WebSocket /api/v1/labs/<lab>/terminal.
//
// The shell lives on the server, not in the socket: when the socket drops (network blip, server
// restart, laptop sleep) we reconnect with backoff, and the server replays recent output, so we
// clear the screen before each (re)attach. Frames: bytes both ways for the shell; text JSON
// {"resize": [cols, rows]} for the window size, and {"ready": true} from the server once the shell
// reads its input (data-term="ready"). Keys typed while the socket is not open yet (or is
// reconnecting) are kept and sent when it opens; the server holds whatever comes before the shell's
// first prompt and writes it after, so nothing typed early is lost or echoed before the prompt.

import { t } from './common.js';

export class LabTerminal {
  constructor(host, labId, statusEl) {
    this.host = host;
    this.labId = labId;
    this.statusEl = statusEl;
    this.ws = null;
    this.connects = 0;
    this.retry = 0;
    this.closing = false;
    this.encoder = new TextEncoder();
    this.pending = [];  // keys and "Run in terminal" commands while the socket is not open
    this.term = new Terminal({
      cursorBlink: false,
      convertEol: false,
      fontFamily: '"DejaVu Sans Mono", "Noto Sans Mono CJK SC", monospace',
      fontSize: 14,
      scrollback: 5000,
      theme: { background: '#1b1e23', foreground: '#e6e6e6' },
    });
    this.fit = new FitAddon.FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(host);
    this.term.onData((data) => this.send(data));
    this.term.onResize(({ cols, rows }) => this.sendControl({ resize: [cols, rows] }));
    new ResizeObserver(() => this.refit()).observe(host);
    window.addEventListener('resize', () => this.refit());
    window.addEventListener('pagehide', () => { this.closing = true; if (this.ws) this.ws.close(); });
    this.refit();
    this.connect();
  }

  refit() {
    if (!this.host.offsetParent) return;  // hidden tab: measure when shown
    try { this.fit.fit(); } catch (err) { /* not measurable yet */ }
  }

  setState(state, text) {
    document.body.dataset.ws = state;
    if (this.statusEl) {
      this.statusEl.dataset.state = state;
      this.statusEl.textContent = text;
    }
  }

  connect() {
    const proto = location.protocol === 'https:' ? 'wss' : 'ws';
    const { cols, rows } = this.term;
    const url = `${proto}://${location.host}/api/v1/labs/${encodeURIComponent(this.labId)}/terminal?cols=${cols}&rows=${rows}`;
    this.setState(this.connects ? 'reconnecting' : 'connecting', t(this.connects ? 'term_reconnecting' : 'term_connecting'));
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => {
      this.retry = 0;
      this.connects += 1;
      document.body.dataset.wsConnects = String(this.connects);
      this.term.reset();  // the server replays the shell's recent output next
      this.setState('open', t('term_connected'));
      document.body.dataset.term = 'starting';
      this.sendControl({ resize: [this.term.cols, this.term.rows] });
      for (const text of this.pending.splice(0)) this.send(text);
    };
    ws.onmessage = (e) => {
      if (typeof e.data !== 'string') { this.term.write(new Uint8Array(e.data)); return; }
      let ctl = null;
      try { ctl = JSON.parse(e.data); } catch (err) { /* not a control frame */ }
      if (ctl && ctl.ready) document.body.dataset.term = 'ready';
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      delete document.body.dataset.term;
      if (this.closing) return;
      if (e.code === 4401) { location.assign(`/join?next=${encodeURIComponent(location.pathname)}`); return; }
      if (e.reason === 'shell exited') this.term.write(`\r\n\x1b[33m${t('term_shell_ended')}\x1b[0m\r\n`);
      this.setState('closed', t('term_reconnecting'));
      const delay = Math.min(5000, 300 * 2 ** this.retry);
      this.retry += 1;
      setTimeout(() => this.connect(), delay);
    };
  }

  send(text) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(this.encoder.encode(text));
    else this.pending.push(text);
  }

  sendControl(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(obj));
  }

  /** Type a command into the shell and press Enter (the "Run in terminal" buttons). */
  run(command) {
    this.send(command.replace(/\r?\n/g, '\r') + '\r');
    this.term.focus();
  }

  /** Drop the socket as a network failure would (tests and the "reconnect" link use it). */
  drop() {
    if (this.ws) this.ws.close(4000, 'dropped by the page');
  }

  focus() { this.term.focus(); }
}
