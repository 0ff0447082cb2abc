// The editor panel: CodeMirror 5 and a file tree of the lab folder (/api/v1/labs/<lab>/files).
//
// Nothing typed is ever dropped silently: each opened file keeps its own CodeMirror document, so
// switching files keeps unsaved text (marked ● in the tree); saving sends If-Match with the ETag the
// text was loaded from, and a 409 (changed on disk meanwhile) shows the server's message and lets
// the attendee choose, with the text still in the editor; leaving the page with unsaved changes
// asks first (beforeunload).
//
// A conflict is only ever shown when the file really changed on disk. So a buffer has one save in
// flight at most (Ctrl+S and the button at once, or twice, wait for it and then send only what
// changed since, with the ETag it got back), and a re-read of the file (tab shown, window focused)
// that overlaps a save is thrown away: it may carry the disk from before the save.

import { api, el, t, ApiError } from './common.js';

const MODES = { py: 'python', sh: 'shell', bash: 'shell', yaml: 'yaml', yml: 'yaml', md: 'markdown' };
// media the editor shows instead of editing (a generated video, a plot, a frame)
const MEDIA = { mp4: 'video', webm: 'video', png: 'img', gif: 'img', jpg: 'img', jpeg: 'img' };

export function mediaKind(path) {
  const ext = path.includes('.') ? path.split('.').pop().toLowerCase() : '';
  return MEDIA[ext] || null;
}

function modeFor(path) {
  const ext = path.includes('.') ? path.split('.').pop().toLowerCase() : '';
  return MODES[ext] || 'text/plain';
}

// etag: the version on disk the text started from; saving: the save on its way (a promise) or null;
// saves: counts new base versions (saves, reloads), so a re-read can tell one happened meanwhile
function newBuffer(doc, etag) {
  return { doc, etag, cleanGen: doc.changeGeneration(), isNew: false, saving: null, saves: 0 };
}

export class LabEditor {
  constructor(root, labId) {
    this.labId = labId;
    this.root = root;
    this.buffers = new Map();  // path -> {doc, etag, cleanGen, isNew, saving, saves}
    this.current = null;
    this.files = [];
    this.tree = root.querySelector('#file-tree');
    this.pathEl = root.querySelector('#editor-path');
    this.dirtyEl = root.querySelector('#editor-dirty');
    this.statusEl = root.querySelector('#editor-status');
    this.saveBtn = root.querySelector('#save-file');
    this.conflictEl = root.querySelector('#editor-conflict');
    this.tabDot = document.querySelector('#tab-editor .dirty-dot');
    const host = root.querySelector('#editor');
    host.innerHTML = '';
    this.emptyEl = el('p', { class: 'editor-empty', text: t('no_file') });
    this.previewEl = el('div', { class: 'media-preview', id: 'media-preview' });
    this.previewEl.hidden = true;
    host.append(this.emptyEl, this.previewEl);
    this.cm = CodeMirror(host, {
      value: '', lineNumbers: true, indentUnit: 4, tabSize: 4, indentWithTabs: false,
      matchBrackets: true, readOnly: 'nocursor',
      extraKeys: {
        'Ctrl-S': () => this.save(), 'Cmd-S': () => this.save(),
        Tab: (cm) => (cm.somethingSelected() ? cm.indentSelection('add') : cm.replaceSelection('    ')),
      },
    });
    this.cm.getWrapperElement().hidden = true;
    this.cm.on('changes', () => this.updateDirty());
    this.saveBtn.addEventListener('click', () => this.save());
    root.querySelector('#new-file').addEventListener('click', () => this.newFile());
    root.querySelector('#refresh-files').addEventListener('click', () => this.loadTree());
    this.conflictEl.querySelector('.conflict-overwrite').textContent = t('conflict_overwrite');
    this.conflictEl.querySelector('.conflict-reload').textContent = t('conflict_reload');
    this.conflictEl.querySelector('.conflict-overwrite').addEventListener('click', () => this.save({ force: true }));
    this.conflictEl.querySelector('.conflict-reload').addEventListener('click', () => this.reloadFromDisk());
    window.addEventListener('beforeunload', (e) => {
      if (this.dirtyPaths().length) { e.preventDefault(); e.returnValue = t('leave_warning'); return t('leave_warning'); }
      return undefined;
    });
    window.addEventListener('focus', () => this.revalidate());
  }

  url(path) {
    return `/api/v1/labs/${encodeURIComponent(this.labId)}/files/${path.split('/').map(encodeURIComponent).join('/')}`;
  }

  isDirty(path) {
    const b = this.buffers.get(path);
    return !!b && (b.isNew || !b.doc.isClean(b.cleanGen));
  }

  dirtyPaths() { return [...this.buffers.keys()].filter((p) => this.isDirty(p)); }

  setStatus(text, kind = '') {
    this.statusEl.textContent = text;
    this.statusEl.dataset.kind = kind;
  }

  // ---- file tree ---------------------------------------------------------------------------
  async loadTree() {
    try {
      this.files = await api(`/api/v1/labs/${encodeURIComponent(this.labId)}/files`);
    } catch (err) {
      this.setStatus(err.message, 'error');
      return;
    }
    this.renderTree();
  }

  renderTree() {
    const paths = new Map(this.files.map((f) => [f.path, f]));
    for (const [path, b] of this.buffers) {  // new, unsaved files appear too
      if (b.isNew && !paths.has(path)) paths.set(path, { path, dir: false, fresh: true });
    }
    const root = { children: new Map() };
    for (const f of [...paths.values()].sort((a, b) => a.path.localeCompare(b.path))) {
      const parts = f.path.split('/');
      let node = root;
      parts.forEach((part, i) => {
        if (!node.children.has(part)) node.children.set(part, { name: part, path: parts.slice(0, i + 1).join('/'), dir: i < parts.length - 1 || f.dir, children: new Map() });
        node = node.children.get(part);
      });
    }
    const build = (node) => {
      const items = [...node.children.values()].sort((a, b) => (b.dir - a.dir) || a.name.localeCompare(b.name));
      return items.map((item) => {
        if (item.dir) {
          return el('li', { class: 'dir' },
            el('details', { open: true }, el('summary', { text: item.name }), el('ul', {}, build(item))));
        }
        const classes = ['file'];
        if (item.path === this.current) classes.push('current');
        if (this.isDirty(item.path)) classes.push('dirty');
        return el('li', {},
          el('button', { type: 'button', class: classes.join(' '), 'data-path': item.path, title: item.path, onclick: () => this.open(item.path) }, item.name));
      });
    };
    this.tree.replaceChildren(...build(root));
  }

  // ---- opening, saving ---------------------------------------------------------------------
  async fetchFile(path) {
    const resp = await fetch(this.url(path), { credentials: 'same-origin', cache: 'no-store' });
    if (!resp.ok) {
      const data = await resp.json().catch(() => ({}));
      throw new ApiError(resp.status, data.detail || resp.statusText, data);
    }
    const type = resp.headers.get('content-type') || '';
    const buf = await resp.arrayBuffer();
    const etag = (resp.headers.get('etag') || '').replace(/"/g, '');
    let text = null;
    if (type.startsWith('text/') || type.includes('json') || type.includes('xml') || type.includes('javascript')) {
      try { text = new TextDecoder('utf-8', { fatal: true }).decode(buf); } catch (err) { text = null; }
    }
    return { text, etag };
  }

  showMedia(path, kind) {
    // media are shown, never edited; a fresh URL each time so a re-generated clip is the new one
    const src = `${this.url(path)}?t=${Date.now()}`;
    const media = kind === 'video'
      ? el('video', { src, controls: true, loop: true, muted: true, autoplay: true, playsinline: true })
      : el('img', { src, alt: path });
    this.previewEl.replaceChildren(media);
    this.previewEl.hidden = false;
    this.cm.getWrapperElement().hidden = true;
    this.emptyEl.hidden = true;
    this.current = path;
    this.pathEl.textContent = path;
    document.body.dataset.editorPath = path;
    this.hideConflict();
    this.setStatus('');
    this.updateDirty();
    this.saveBtn.disabled = true;
  }

  async open(path) {
    const kind = mediaKind(path);
    if (kind) { this.showMedia(path, kind); return; }
    if (path === this.current) return;
    let b = this.buffers.get(path);
    if (!b) {
      this.setStatus(t('loading'));
      let file;
      try {
        file = await this.fetchFile(path);
      } catch (err) {
        this.setStatus(err.message, 'error');
        return;
      }
      if (file.text === null) { this.setStatus(t('binary_file'), 'error'); return; }
      b = this.buffers.get(path);  // opened twice at once: the first one to arrive is the buffer
      if (!b) {
        b = newBuffer(CodeMirror.Doc(file.text, modeFor(path)), file.etag);
        this.buffers.set(path, b);
      }
      this.setStatus('');
    }
    this.show(path);
  }

  show(path) {
    const b = this.buffers.get(path);
    this.current = path;
    this.cm.swapDoc(b.doc);  // the previous file keeps its own document, unsaved text included
    this.cm.setOption('readOnly', false);
    this.previewEl.hidden = true;
    this.previewEl.replaceChildren();
    this.cm.getWrapperElement().hidden = false;
    this.emptyEl.hidden = true;
    this.pathEl.textContent = path;
    document.body.dataset.editorPath = path;
    this.hideConflict();
    this.cm.refresh();
    this.cm.focus();
    this.updateDirty();
  }

  updateDirty() {
    const dirty = this.current ? this.isDirty(this.current) : false;
    this.dirtyEl.hidden = !dirty;
    this.saveBtn.disabled = !this.current;
    const any = this.dirtyPaths().length > 0;
    if (this.tabDot) this.tabDot.hidden = !any;
    document.body.dataset.editorDirty = any ? 'true' : 'false';
    for (const btn of this.tree.querySelectorAll('button.file')) {
      btn.classList.toggle('dirty', this.isDirty(btn.dataset.path));
      btn.classList.toggle('current', btn.dataset.path === this.current);
    }
  }

  /** Save the current file. Resolves to true once it is on disk as the editor shows it. */
  save({ force = false } = {}) {
    const path = this.current;
    if (!path || !this.buffers.has(path)) return Promise.resolve(false);  // nothing open, or media
    const b = this.buffers.get(path);
    const previous = b.saving || Promise.resolve(false);
    // asked while another save is on its way: wait for it; if it worked and nothing was typed
    // since, it already sent this text (sending it again with the old ETag would be a 409)
    const run = previous.then((ok) => (ok && !force && !this.isDirty(path) ? true : this.put(path, b, { force })));
    b.saving = run;
    const done = () => { if (b.saving === run) b.saving = null; };
    run.then(done, done);
    return run;
  }

  async put(path, b, { force }) {
    const gen = b.doc.changeGeneration();
    const headers = { 'Content-Type': 'text/plain; charset=utf-8' };
    if (b.etag && !force) headers['If-Match'] = `"${b.etag}"`;
    this.setStatus(t('saving'));
    try {
      const result = await api(this.url(path), { method: 'PUT', body: b.doc.getValue(), headers });
      b.etag = result.etag;
      b.cleanGen = gen;
      b.saves += 1;
      const wasNew = b.isNew;
      b.isNew = false;
      this.hideConflict();
      this.setStatus(t('saved'), 'ok');
      document.body.dataset.editorSaved = `${path}@${b.etag}`;
      if (wasNew || !this.files.some((f) => f.path === path)) await this.loadTree();
      this.updateDirty();
      return true;
    } catch (err) {
      if (err.status === 409) {
        this.showConflict(err.message);
        this.setStatus(t('save_failed'), 'error');
      } else {
        this.setStatus(`${t('save_failed')}: ${err.message}`, 'error');
      }
      return false;
    }
  }

  showConflict(message) {
    this.conflictEl.querySelector('.conflict-message').textContent = message;
    this.conflictEl.hidden = false;
  }

  hideConflict() { this.conflictEl.hidden = true; }

  async reloadFromDisk() {
    const path = this.current;
    if (!path) return;
    if (this.isDirty(path) && !window.confirm(t('confirm_discard'))) return;
    const b = this.buffers.get(path);
    const file = await this.fetchFile(path).catch((err) => { this.setStatus(err.message, 'error'); return null; });
    if (!file || file.text === null) return;
    this.replaceText(b, file);
    this.hideConflict();
    this.updateDirty();
  }

  replaceText(b, file) {
    const cursor = b.doc.getCursor();
    b.doc.setValue(file.text);
    b.doc.setCursor(cursor);
    b.etag = file.etag;
    b.cleanGen = b.doc.changeGeneration();
    b.isNew = false;
    b.saves += 1;  // a new base version, as a save makes one
  }

  /** The current file changed on disk (terminal, reset)? Take the new text when ours is clean. */
  async revalidate() {
    const path = this.current;
    if (!path) return;
    const b = this.buffers.get(path);
    if (!b || b.isNew || b.saving) return;  // media, a file not saved yet, or a save decides the ETag
    const base = b.saves;
    let file;
    try { file = await this.fetchFile(path); } catch (err) { return; }
    // a save (or another re-read) started or ended meanwhile: this answer may predate it
    if (b.saving || b.saves !== base || this.buffers.get(path) !== b) return;
    if (file.text === null || file.etag === b.etag || path !== this.current) return;
    if (this.isDirty(path)) this.showConflict(t('changed_on_disk'));
    else { this.replaceText(b, file); this.updateDirty(); }
  }

  newFile() {
    const raw = window.prompt(t('new_file_prompt'), '');
    const path = (raw || '').trim().replace(/^\/+/, '').replace(/\\/g, '/');
    if (!path || path.endsWith('/')) return;
    if (this.buffers.has(path) || this.files.some((f) => f.path === path && !f.dir)) { this.open(path); return; }
    this.buffers.set(path, { ...newBuffer(CodeMirror.Doc('', modeFor(path)), null), isNew: true });
    this.renderTree();
    this.show(path);
  }

  /** After "reset this lab": the files on disk are new; forget every buffer. */
  async forgetAll() {
    const reopen = this.current;
    this.buffers.clear();
    this.current = null;
    this.cm.swapDoc(CodeMirror.Doc(''));
    this.cm.setOption('readOnly', 'nocursor');
    this.cm.getWrapperElement().hidden = true;
    this.emptyEl.hidden = false;
    this.pathEl.textContent = '';
    await this.loadTree();
    if (reopen && this.files.some((f) => f.path === reopen)) await this.open(reopen);
    this.updateDirty();
  }

  shown() {
    this.cm.refresh();
    this.loadTree();
    this.revalidate();
  }
}
