/* The event page's staff card and audit log (labserver/services/staff/).
 *
 * Staff: GET /api/v1/events/{id}/staff lists who reaches the event; an organiser adds a person
 * (POST, the answer carries their one-time sign-in link, shown once) or takes their roles on the
 * event away (DELETE). Audit: GET /api/v1/events/{id}/audit, newest first, reloaded after each
 * change of the help queue or the room (the stream's deltas) and every 15 s. */
(function () {
  'use strict';

  const $ = (sel, root) => (root || document).querySelector(sel);
  const S = JSON.parse(($('#i-strings') || { textContent: '{}' }).textContent);
  const CFG = JSON.parse(($('#i-config') || { textContent: '{}' }).textContent);
  const esc = (s) => String(s == null ? '' : s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
  const may = (action) => (CFG.perms || []).indexOf(action) >= 0;

  async function api(method, url, body) {
    const opts = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
    if (body !== undefined) { opts.headers['Content-Type'] = 'application/json'; opts.body = JSON.stringify(body); }
    const resp = await fetch(url, opts);
    const data = resp.status === 204 ? null : await resp.json().catch(() => null);
    if (!resp.ok) {
      const d = data && data.detail;
      throw new Error(typeof d === 'string' ? d : (d && d.message) || resp.statusText);
    }
    return data;
  }

  const roleName = (r) => S['role_' + r] || r;
  const summary = (d) => Object.keys(d || {}).sort().map((k) => k + ': ' + d[k]).join(', ');

  function staffCard(eventId) {
    const list = $('#staff-list');
    if (!list) return;
    async function load() {
      const people = await api('GET', '/api/v1/events/' + eventId + '/staff');
      $('#staff-count').textContent = people.length;
      list.innerHTML = people.map((p) => {
        const roles = p.roles.map((g) => roleName(g.role) + (g.event_id == null ? ' (' + S.every_event + ')' : '')).join(', ');
        const here = p.roles.some((g) => g.event_id === eventId);
        return '<li data-staff="' + p.id + '"><b>' + esc(p.name) + '</b> <span class="muted">' + esc(roles) + '</span>'
          + (may('staff') && here ? ' <button class="link staff-remove" data-id="' + p.id + '">' + esc(S.remove) + '</button>' : '')
          + '</li>';
      }).join('');
    }
    list.addEventListener('click', async (ev) => {
      const btn = ev.target.closest('.staff-remove');
      if (!btn) return;
      if (!window.confirm(S.staff_remove_confirm)) return;
      await api('DELETE', '/api/v1/events/' + eventId + '/staff/' + btn.dataset.id);
      await load();
      audit.load();
    });
    const form = $('#staff-form');
    if (form) {
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        try {
          const out = await api('POST', '/api/v1/events/' + eventId + '/staff', {
            name: $('#staff-name').value, role: $('#staff-role').value, email: $('#staff-email').value,
          });
          $('#staff-link-url').textContent = out.link || out.password;
          $('#staff-link').hidden = false;
          form.reset();
          await load();
          audit.load();
        } catch (e) {
          window.alert(S.failed + ' ' + e.message);
        }
      });
    }
    load().catch(() => {});
  }

  const audit = {
    eventId: null,
    async load() {
      if (!audit.eventId || !$('#audit-rows')) return;
      const rows = await api('GET', '/api/v1/events/' + audit.eventId + '/audit?limit=100');
      $('#audit-count').textContent = rows.length;
      $('#audit-card').dataset.count = rows.length;
      $('#audit-rows').innerHTML = rows.length ? rows.map((r) =>
        '<tr data-action="' + esc(r.action) + '"><td>' + esc(new Date(r.at).toLocaleTimeString()) + '</td><td>'
        + esc(r.actor) + ' <span class="muted">' + esc(roleName(r.role)) + '</span></td><td>' + esc(S['audit_' + r.action.replace(/-/g, '_')] || r.action)
        + (summary(r.detail) ? ' <span class="muted">' + esc(summary(r.detail)) + '</span>' : '') + '</td><td>' + esc(r.target) + '</td></tr>'
      ).join('') : '<tr><td colspan="4" class="muted">' + esc(S.nothing_yet) + '</td></tr>';
    },
  };

  function start() {
    if (!CFG.event || !$('#audit-card')) return;
    audit.eventId = CFG.event;
    staffCard(CFG.event);
    audit.load().catch(() => {});
    setInterval(() => audit.load().catch(() => {}), 15000);
    // the dashboard's own actions and the room's deltas reload it soon after
    let timer = null;
    document.addEventListener('labserver:changed', () => {
      clearTimeout(timer);
      timer = setTimeout(() => audit.load().catch(() => {}), 300);
    });
    document.addEventListener('click', (ev) => {
      if (ev.target.closest('button')) document.dispatchEvent(new Event('labserver:changed'));
    });
  }

  start();
})();
