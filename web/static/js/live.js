// Live updates: one EventSource on /api/v1/stream per page. Each SSE event is re-dispatched on
// `window` as a CustomEvent named `live:<kind>` (detail = the JSON payload), so modules stay
// independent. Also owns the announcement banner, which every attendee page shows.

import { api } from './common.js';

const KINDS = ['check.started', 'check.queued', 'check.finished', 'env.state', 'env.progress', 'env.queue', 'step.opened',
  'help.raised', 'help.claimed', 'help.resolved', 'help.cancelled', 'lab.reset', 'announcement',
  'pace', 'resync', 'solution.revealed', 'event.status', 'share.asked', 'share.started', 'share.ended',
  'share.typing', 'lab.changed'];

let source = null;

export function connectLive() {
  if (source) return source;
  source = new EventSource('/api/v1/stream');
  source.addEventListener('ready', () => {
    document.body.dataset.live = 'ready';
    window.dispatchEvent(new CustomEvent('live:ready'));
  });
  source.onerror = () => { document.body.dataset.live = 'reconnecting'; };  // EventSource retries itself
  for (const kind of KINDS) {
    source.addEventListener(kind, (e) => {
      let data = {};
      try { data = JSON.parse(e.data); } catch (err) { /* keep {} */ }
      window.dispatchEvent(new CustomEvent(`live:${kind}`, { detail: data }));
    });
  }
  window.addEventListener('pagehide', () => source && source.close());
  return source;
}

// ---- announcements -----------------------------------------------------------------------------
const banner = document.getElementById('announcement');
const DISMISSED = 'labserver.announcement.dismissed';

function showAnnouncement(a) {
  if (!banner || !a || !a.message) return;
  banner.querySelector('.announcement-text').textContent = a.message;
  banner.dataset.id = a.id ?? '';
  banner.hidden = false;
}

if (banner) {
  banner.querySelector('.announcement-close').addEventListener('click', () => {
    banner.hidden = true;
    if (banner.dataset.id) localStorage.setItem(DISMISSED, banner.dataset.id);
  });
  window.addEventListener('live:announcement', (e) => showAnnouncement(e.detail));
  // the latest announcement of the last hour, unless dismissed already
  api('/api/v1/announcements').then((rows) => {
    const latest = rows && rows[0];
    if (!latest || String(latest.id) === localStorage.getItem(DISMISSED)) return;
    if (Date.now() - new Date(latest.created_at).getTime() < 3600 * 1000) showAnnouncement(latest);
  }).catch(() => {});
  connectLive();
}
