// `labserver serve --dev`: the page of a lab that does not load lists its problems; it reloads
// when the author saves a file of that lab (live event lab.changed), fixed or not.

import { connectLive } from './live.js';

const lab = JSON.parse(document.getElementById('dev-lab').textContent);
window.addEventListener('live:lab.changed', (e) => {
  if (e.detail.lab === lab) window.location.reload();
});
connectLive();
