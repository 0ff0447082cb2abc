// Join page: POST /api/v1/join (sets the attendee cookie), then go to the lab list.
import { api, t } from './common.js';

const form = document.getElementById('join-form');
const error = document.getElementById('join-error');
const codeInput = document.getElementById('event-code');
const nameInput = document.getElementById('display-name');

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  error.hidden = true;
  const button = form.querySelector('button[type=submit]');
  button.disabled = true;
  try {
    await api('/api/v1/join', {
      method: 'POST',
      json: { event_code: codeInput.value, name: nameInput.value },
    });
    location.assign(form.dataset.next || '/labs');
  } catch (err) {
    error.textContent = err.message || t('join_failed');
    error.hidden = false;
    button.disabled = false;
    (err.body && err.body.code === 'wrong-code' ? codeInput : nameInput).focus();
  }
});
(codeInput.value ? nameInput : codeInput).focus();
