// The lab page: wires the step instructions (navigation, Check, hints, history), the terminal and
// the editor tabs, "Run in terminal" buttons, raise hand, reset and live updates.

import { api, el, t, toast } from './common.js';
import { connectLive } from './live.js';
import { LabTerminal } from './terminal.js';
import { LabEditor } from './editor.js';
import { StepChecks } from './check.js';
import { ShareBanner } from './share.js';
import './replay.js';

const config = JSON.parse(document.getElementById('lab-config').textContent);
const labId = config.lab;
const stepIds = config.steps.map((s) => s.id);

// ---- tabs: terminal | editor ---------------------------------------------------------------
const tabs = { terminal: document.getElementById('tab-terminal'), editor: document.getElementById('tab-editor') };
const panels = { terminal: document.getElementById('panel-terminal'), editor: document.getElementById('panel-editor') };

// Split view (editor above the terminal) is the default on wide screens; the choice is remembered.
const SPLIT_KEY = 'labserver.split';
const splitToggle = document.getElementById('split-toggle');
let split = (localStorage.getItem(SPLIT_KEY) ?? (window.innerWidth >= 1800 && window.innerHeight >= 900 ? '1' : '0')) === '1';

function showTab(name) {
  for (const [key, tab] of Object.entries(tabs)) {
    tab.setAttribute('aria-selected', String(key === name));
    panels[key].hidden = !split && key !== name;
  }
  document.body.dataset.tab = name;
  if (name === 'terminal') { terminal.refit(); terminal.focus(); } else { editor.shown(); }
}

function setSplit(on) {
  split = on;
  document.body.classList.toggle('split', on);
  splitToggle.setAttribute('aria-pressed', String(on));
  localStorage.setItem(SPLIT_KEY, on ? '1' : '0');
  showTab(document.body.dataset.tab || 'terminal');
  if (on) { editor.cm.refresh(); terminal.refit(); }
}
tabs.terminal.addEventListener('click', () => showTab('terminal'));
tabs.editor.addEventListener('click', () => showTab('editor'));
splitToggle.addEventListener('click', () => setSplit(!split));

const terminal = new LabTerminal(document.getElementById('terminal'), labId, document.getElementById('term-status'));
const editor = new LabEditor(document.getElementById('panel-editor'), labId);
window.labTerminal = terminal;  // tests read terminal.term.buffer
window.term = terminal.term;
window.labEditor = editor;
editor.loadTree();

// ---- steps ---------------------------------------------------------------------------------
const progressEl = document.getElementById('lab-progress');
const statuses = Object.fromEntries(config.steps.map((s) => [s.id, s.status]));

function setStepStatus(step, status) {
  if (!(step in statuses)) return;
  if (statuses[step] === 'passed') return;  // a step once passed stays passed
  // not an attempt: running, or the platform could not run it (not gradable; interrupted: older servers)
  if (status === 'interrupted' || status === 'not_gradable' || status === 'running') return;
  if (status === 'imported' && statuses[step] !== 'not-started' && statuses[step] !== 'working') return;
  statuses[step] = status === 'passed' ? 'passed' : status === 'imported' ? 'imported'
    : status === 'error' || status === 'timeout' ? 'error' : 'failing';
  const chip = document.querySelector(`.step-chip[data-step="${step}"]`);
  chip.className = chip.className.replace(/status-[\w-]+/, `status-${statuses[step]}`);
  const article = document.getElementById(`step-${step}`);
  article.dataset.status = statuses[step];
  if (statuses[step] === 'passed') article.querySelector('.step-state').textContent = `✓ ${t('passed')}`;
  const passed = Object.values(statuses).filter((s) => s === 'passed').length;
  progressEl.dataset.passed = String(passed);
  progressEl.textContent = progressEl.textContent.replace(/\d+\s*\/\s*\d+/, `${passed}/${config.total}`);
  document.getElementById('completion-record').hidden = passed < config.total;
}

const checks = new StepChecks(labId, { onStatus: setStepStatus });
let current = null;

function selectStep(step, { push = true } = {}) {
  if (!stepIds.includes(step)) return;
  current = step;
  for (const article of document.querySelectorAll('article.step')) article.hidden = article.dataset.step !== step;
  for (const chip of document.querySelectorAll('.step-chip')) chip.classList.toggle('current', chip.dataset.step === step);
  const i = stepIds.indexOf(step);
  document.getElementById('prev-step').disabled = i === 0;
  document.getElementById('next-step').disabled = i === stepIds.length - 1;
  document.body.dataset.step = step;
  document.querySelector('.step-scroll').scrollTop = 0;
  checks.select(step);
  if (push) history.replaceState(null, '', `?step=${encodeURIComponent(step)}`);
  if (document.getElementById(`step-${step}`).dataset.locked !== 'true') {
    api(`/api/v1/labs/${encodeURIComponent(labId)}/steps/${encodeURIComponent(step)}/open`, { method: 'POST' }).catch(() => {});
  }
}

for (const chip of document.querySelectorAll('.step-chip')) {
  chip.addEventListener('click', (e) => { e.preventDefault(); selectStep(chip.dataset.step); });
}
document.getElementById('prev-step').addEventListener('click', () => selectStep(stepIds[stepIds.indexOf(current) - 1]));
document.getElementById('next-step').addEventListener('click', () => selectStep(stepIds[stepIds.indexOf(current) + 1]));
selectStep(config.step, { push: false });

// ---- hints opened: told once per step (the post-event report counts them) ----------------------
// ('toggle' does not bubble: listen in the capture phase, so hints added later are counted too)
document.addEventListener('toggle', (e) => {
  const details = e.target;
  if (!(details instanceof HTMLDetailsElement) || !details.open || !details.classList.contains('step-hints')) return;
  const step = details.closest('article.step')?.dataset.step;
  if (!step || details.dataset.told) return;
  details.dataset.told = '1';
  api(`/api/v1/labs/${encodeURIComponent(labId)}/steps/${encodeURIComponent(step)}/hints`, { method: 'POST' }).catch(() => {});
}, true);

// ---- "Run in terminal" -----------------------------------------------------------------------
document.querySelector('.step-scroll').addEventListener('click', (e) => {
  const button = e.target.closest('button.run-in-terminal');
  if (!button) return;
  showTab('terminal');
  terminal.run(button.dataset.command);
});

// ---- Ctrl+S anywhere but the terminal saves the editor's file ---------------------------------
// (inside the editor CodeMirror's own Ctrl-S binding has saved already and marked the event handled)
document.addEventListener('keydown', (e) => {
  if (e.defaultPrevented) return;
  if ((e.ctrlKey || e.metaKey) && e.key.toLowerCase() === 's' && !e.target.closest('#terminal')) {
    e.preventDefault();
    if (editor.current) editor.save();
  }
});

// ---- raise hand ----------------------------------------------------------------------------
const helpButton = document.getElementById('help-button');
const helpStatus = document.getElementById('help-status');
let help = null;

function renderHelp() {
  const state = help ? help.state : 'none';
  document.body.dataset.help = state;
  helpButton.textContent = t(help ? 'lower_hand' : 'raise_hand');
  helpButton.classList.toggle('raised', !!help);
  if (!help) { helpStatus.hidden = true; return; }
  helpStatus.textContent = state === 'claimed'
    ? (help.claimed_by ? t('help_claimed_by', { name: help.claimed_by }) : t('help_claimed'))
    : t('help_raised');
  helpStatus.dataset.state = state;
  helpStatus.hidden = false;
}

helpButton.addEventListener('click', async () => {
  helpButton.disabled = true;
  try {
    if (help) { await api('/api/v1/help', { method: 'DELETE' }); help = null; }
    else help = await api('/api/v1/help', { method: 'POST', json: { lab: labId, step: current || '' } });
  } catch (err) { toast(err.message, { kind: 'error' }); }
  helpButton.disabled = false;
  renderHelp();
});
window.addEventListener('live:help.claimed', (e) => {
  help = { ...(help || {}), state: 'claimed', claimed_by: e.detail.claimed_by || e.detail.by || '' };
  renderHelp();
});
for (const kind of ['help.resolved', 'help.cancelled']) {
  window.addEventListener(`live:${kind}`, () => { help = null; renderHelp(); });
}
api('/api/v1/help').then((h) => { help = h; renderHelp(); }).catch(() => {});

// ---- reset this lab ------------------------------------------------------------------------
const dialog = document.getElementById('reset-dialog');
document.getElementById('reset-lab').addEventListener('click', () => dialog.showModal());
dialog.addEventListener('close', async () => {
  if (dialog.returnValue !== 'reset') return;
  try {
    const result = await api(`/api/v1/labs/${encodeURIComponent(labId)}/reset`, { method: 'POST' });
    const box = document.getElementById('reset-result');
    box.textContent = t('reset_done', { path: result.backup });
    box.hidden = false;
    box.dataset.backup = result.backup;
    box.onclick = () => { box.hidden = true; };
    await editor.forgetAll();
  } catch (err) {
    toast(`${t('reset_failed')}: ${err.message}`, { kind: 'error' });
  }
});

// ---- live updates --------------------------------------------------------------------------
const termStatus = document.getElementById('term-status');
window.addEventListener('live:env.state', (e) => {
  const { state, message } = e.detail;
  if (state === 'ready' && termStatus.dataset.queued) { delete termStatus.dataset.queued; termStatus.textContent = t('term_connected'); }
  if (state === 'failed') toast(`${t('env_failed')}: ${message}`, { kind: 'error', ms: 0 });
  else if (state !== 'ready' && message && document.body.dataset.ws !== 'open') termStatus.textContent = message;
});
// waiting for a turn to start: the place in the queue, shown whether or not the terminal is open
window.addEventListener('live:env.queue', (e) => {
  const { ahead, message } = e.detail;
  termStatus.textContent = ahead > 0 ? t('env_queued', { n: ahead }) : (message && message.includes('full') ? t('env_full') : t('env_next'));
  termStatus.dataset.queued = '1';
});
window.addEventListener('live:env.progress', (e) => {
  if (termStatus.dataset.queued && e.detail.message) { termStatus.textContent = e.detail.message; return; }
  if (document.body.dataset.ws !== 'open' && e.detail.message) termStatus.textContent = e.detail.message;
});
// a reset from elsewhere (the instructor, another tab): say where the old files went; buffers with
// unsaved text stay, and saving them meets the 409 conflict instead of silently overwriting
window.addEventListener('live:lab.reset', (e) => {
  if (e.detail.lab !== labId) return;
  const box = document.getElementById('reset-result');
  if (e.detail.backup && box.dataset.backup !== e.detail.backup) {
    box.textContent = t('reset_done', { path: e.detail.backup });
    box.dataset.backup = e.detail.backup;
    box.hidden = false;
    box.onclick = () => { box.hidden = true; };
  }
  if (editor.dirtyPaths().length) editor.loadTree(); else editor.forgetAll();
});
function hintsElement(hints) {
  return el('details', { class: 'step-hints' },
    el('summary', { text: `${t('hints')} (${hints.length})` }),
    el('ol', {}, hints.map((h) => el('li', { text: h }))));
}

// serve --dev: the author saved a file of this lab. The text, titles and hints change in place;
// when the steps themselves changed, or the lab broke (its page then lists the problems), reload.
window.addEventListener('live:lab.changed', async (e) => {
  if (!config.dev || e.detail.lab !== labId) return;
  if (e.detail.broken) { window.location.reload(); return; }
  let lab;
  try { lab = await api(`/api/v1/labs/${encodeURIComponent(labId)}`); } catch (err) { window.location.reload(); return; }
  if (lab.steps.map((s) => s.id).join('/') !== stepIds.join('/')) { window.location.reload(); return; }
  for (const s of lab.steps) {
    const article = document.getElementById(`step-${s.id}`);
    article.querySelector('.step-title').textContent = s.title;
    document.querySelector(`.step-chip[data-step="${s.id}"]`).title = s.title;
    const md = article.querySelector('.markdown');
    if (md) md.innerHTML = s.html;  // rendered by the server (raw HTML escaped)
    article.querySelector('.step-hints')?.remove();
    if (md && s.hints.length) md.after(hintsElement(s.hints));
  }
  document.body.dataset.labReloads = String(Number(document.body.dataset.labReloads || 0) + 1);
});

// pacing: the instructor opens (or closes) steps for the whole room; update them in place
window.addEventListener('live:pace', async (e) => {
  if (e.detail.lab && e.detail.lab !== labId) return;
  let lab;
  try { lab = await api(`/api/v1/labs/${encodeURIComponent(labId)}`); } catch (err) { return; }
  let opened = 0;
  for (const s of lab.steps) {
    const article = document.getElementById(`step-${s.id}`);
    if (!article || (article.dataset.locked === 'true') === s.locked) continue;
    article.dataset.locked = String(s.locked);
    document.querySelector(`.step-chip[data-step="${s.id}"]`).classList.toggle('locked', s.locked);
    const body = article.querySelector('.markdown, .locked-note');
    article.querySelector('.step-hints')?.remove();
    if (s.locked) {
      body.replaceWith(el('p', { class: 'locked-note', text: t('step_locked') }));
    } else {
      opened += 1;
      const md = el('div', { class: 'markdown' });
      md.innerHTML = s.html;  // rendered by the server from the lab's Markdown (raw HTML escaped)
      body.replaceWith(md);
      if (s.hints.length) md.after(hintsElement(s.hints));
    }
  }
  if (current) checks.select(current);
  if (opened) toast(t('steps_opened'));
});

window.addEventListener('live:solution.revealed', (e) => {
  if (e.detail.lab !== labId) return;
  const prefix = `${labId}/`;
  const files = (e.detail.files || []).map((f) => (f.startsWith(prefix) ? f.slice(prefix.length) : f));
  toast(t('solution_revealed', { files: files.join(', ') }), { ms: 0 });
  editor.loadTree();
});

connectLive();
setSplit(split);
showTab('terminal');

// ---- help with consent, and my terminal recordings --------------------------------------------
const shareBanner = document.getElementById('share-banner');
if (shareBanner) new ShareBanner(shareBanner);
const recordingsDialog = document.getElementById('recordings-dialog');
if (recordingsDialog) {
  document.getElementById('my-recordings').addEventListener('click', () => {
    recordingsDialog.showModal();
    document.getElementById('my-recordings-panel').recordings.load();
  });
}
