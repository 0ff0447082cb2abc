// Shared helpers for the attendee pages: translated UI strings, JSON fetch, small DOM helpers.

const stringsEl = document.getElementById('ui-strings');
const STRINGS = stringsEl ? JSON.parse(stringsEl.textContent) : {};

/** The translated UI string `key`, with %(name)s placeholders filled from `vars`. */
export function t(key, vars = {}) {
  const text = STRINGS[key] ?? key;
  return text.replace(/%\((\w+)\)s/g, (m, name) => (name in vars ? String(vars[name]) : m));
}

export class ApiError extends Error {
  constructor(status, detail, body) {
    super(detail);
    this.status = status;
    this.body = body || {};
  }
}

/** fetch() a JSON API route; throws ApiError with the server's message (already translated). */
export async function api(path, { method = 'GET', json, body, headers = {} } = {}) {
  const opts = { method, headers: { Accept: 'application/json', ...headers }, credentials: 'same-origin' };
  if (json !== undefined) {
    opts.body = JSON.stringify(json);
    opts.headers['Content-Type'] = 'application/json';
  } else if (body !== undefined) {
    opts.body = body;
  }
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (err) {
    throw new ApiError(0, t('request_failed'));
  }
  const type = resp.headers.get('content-type') || '';
  const data = type.includes('application/json') ? await resp.json().catch(() => ({})) : null;
  if (resp.status === 401 && !path.endsWith('/join')) {  // the attendee cookie is gone or unknown
    location.assign(`/join?next=${encodeURIComponent(location.pathname + location.search)}`);
  }
  if (!resp.ok) {
    const detail = data && typeof data.detail === 'string' ? data.detail : `${resp.status} ${resp.statusText}`;
    throw new ApiError(resp.status, detail, data);
  }
  return data;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function timeOf(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return d.toLocaleTimeString(document.documentElement.lang || undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/** A short-lived message at the bottom of the page. */
export function toast(message, { kind = 'info', ms = 8000 } = {}) {
  let box = document.getElementById('toast');
  if (!box) {
    box = el('div', { id: 'toast', class: 'toast', role: 'status' });
    document.body.append(box);
  }
  box.textContent = message;
  box.dataset.kind = kind;
  box.hidden = false;
  box.onclick = () => { box.hidden = true; };  // click to dismiss (ms = 0 stays until then)
  clearTimeout(box._timer);
  if (ms) box._timer = setTimeout(() => { box.hidden = true; }, ms);
}
