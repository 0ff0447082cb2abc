// Lab list: upload a progress file exported in self-paced mode (POST /api/v1/progress/import).
const form = document.getElementById("import-progress");
if (form) {
  const status = document.getElementById("import-status");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = form.elements.file.files[0];
    if (!file) return;
    status.textContent = "…";
    const resp = await fetch("/api/v1/progress/import", {
      method: "POST", body: await file.text(), headers: { "Content-Type": "application/json" },
    });
    const body = await resp.json().catch(() => ({}));
    if (resp.ok) {
      location.reload();
    } else {
      status.textContent = body.detail || `HTTP ${resp.status}`;
    }
  });
}
