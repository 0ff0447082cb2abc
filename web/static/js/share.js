// Help with consent on the attendee's lab page: an instructor asks to type in my terminal
// (share.asked) and I accept or decline; while it is shared the banner says so, shows who else is
// typing (share.typing) and has "Stop sharing". Nobody types in my terminal before I accept; either
// side ends it (share.ended). Routes: GET|DELETE /api/v1/share, POST /api/v1/share/{id}/accept.

import { api, t, toast } from './common.js';

export class ShareBanner {
  constructor(root) {
    this.root = root;
    this.text = root.querySelector('.share-text');
    this.typing = root.querySelector('.share-typing');
    this.accept = root.querySelector('.share-accept');
    this.decline = root.querySelector('.share-decline');
    this.stop = root.querySelector('.share-stop');
    this.share = null;
    this.typingTimer = null;
    this.accept.addEventListener('click', () => this.answer(true));
    this.decline.addEventListener('click', () => this.answer(false));
    this.stop.addEventListener('click', () => this.answer(false));
    window.addEventListener('live:share.asked', () => this.refresh());
    window.addEventListener('live:share.started', () => this.refresh());
    window.addEventListener('live:share.ended', (e) => {
      if (this.share && e.detail.share_id === this.share.id) { this.share = null; this.render(); }
    });
    window.addEventListener('live:share.typing', (e) => this.someoneTyping(e.detail.by));
    window.addEventListener('live:resync', () => this.refresh());
    this.refresh();
  }

  async refresh() {
    try { this.share = await api('/api/v1/share'); } catch (err) { this.share = null; }
    this.render();
  }

  async answer(yes) {
    if (!this.share) return;
    try {
      this.share = yes ? await api(`/api/v1/share/${this.share.id}/accept`, { method: 'POST' }) : null;
      if (!yes) await api('/api/v1/share', { method: 'DELETE' });
    } catch (err) { toast(err.message, { kind: 'error' }); await this.refresh(); return; }
    this.render();
  }

  someoneTyping(name) {
    if (!this.share || this.share.state !== 'active') return;
    this.typing.textContent = t('share_typing', { name });
    this.typing.hidden = false;
    this.root.dataset.typing = name;
    clearTimeout(this.typingTimer);
    this.typingTimer = setTimeout(() => { this.typing.hidden = true; delete this.root.dataset.typing; }, 3000);
  }

  render() {
    const s = this.share;
    const state = s ? s.state : 'none';
    this.root.dataset.state = state;
    document.body.dataset.share = state;
    this.root.hidden = !s;
    if (!s) { this.typing.hidden = true; return; }
    this.text.textContent = state === 'asked' ? t('share_asked', { name: s.by }) : t('share_active', { name: s.by });
    this.accept.hidden = state !== 'asked';
    this.decline.hidden = state !== 'asked';
    this.stop.hidden = state !== 'active';
  }
}
