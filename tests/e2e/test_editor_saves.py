"""Saving from the editor never reports a conflict the attendee did not cause: not after a check,
not when Ctrl+S and the Save button fire together, not when the editor re-reads the file (tab shown,
window focused) while a save is on its way. A file really changed on disk still shows the conflict."""

from __future__ import annotations

import hashlib

import pytest
from playwright.sync_api import Page, Request, Response, expect

from tests.e2e.conftest import (
    RMSNORM_SOLUTION,
    editor_text,
    join,
    open_file,
    open_lab,
    run_in_terminal,
    show_editor,
    type_in_editor,
    wait_terminal_line,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("no_script_errors")]

FILE_URL = "/api/v1/labs/getting-started/files/rmsnorm.py"
ROUNDS = 4


def etag(text: str) -> str:  # the server's ETag: a hash of the bytes on disk
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def on_disk(page: Page) -> str:
    return page.request.get(FILE_URL).text()


def saves_of(page: Page) -> tuple[list[Request], list[Response]]:
    """Every PUT of rmsnorm.py the page sends, and every answer it gets."""
    puts: list[Request] = []
    answers: list[Response] = []
    page.on("request", lambda r: puts.append(r) if r.method == "PUT" and r.url.endswith(FILE_URL) else None)
    page.on(
        "response",
        lambda r: answers.append(r) if r.request.method == "PUT" and r.url.endswith(FILE_URL) else None,
    )
    return puts, answers


def saved(page: Page, text: str) -> None:
    """The editor says Saved, for exactly this text, with no conflict showing."""
    expect(page.locator("body")).to_have_attribute("data-editor-saved", f"rmsnorm.py@{etag(text)}")
    expect(page.locator("#editor-status")).to_have_text("Saved")
    expect(page.locator("#editor-conflict")).to_be_hidden()
    expect(page.locator("#editor-dirty")).to_be_hidden()


def set_text(page: Page, text: str) -> None:
    page.evaluate("(text) => labEditor.cm.setValue(text)", text)
    page.locator(".CodeMirror textarea").focus()


def test_check_then_edit_then_save_again_and_again(page: Page) -> None:
    join(page)
    open_lab(page, step="write-file")
    puts, answers = saves_of(page)
    open_file(page, "rmsnorm.py")
    history = page.locator("#step-write-file .history-list li.run")
    for i in range(ROUNDS):
        page.click("#check-button")  # no notes/hello.txt yet: fails, and the page re-reads its views
        expect(history).to_have_count(i + 1, timeout=90_000)
        text = f"# round {i}\n{RMSNORM_SOLUTION}"
        set_text(page, text)
        page.keyboard.press("Control+s")
        saved(page, text)
        assert len(puts) == i + 1, [p.headers.get("if-match") for p in puts]  # one key press, one save
        assert on_disk(page) == text

    # Ctrl+S, then the button twice before the first save has answered: one text, no conflict
    type_in_editor(page, "# both\n")
    page.keyboard.press("Control+s")
    page.evaluate("() => { const b = document.querySelector('#save-file'); b.click(); b.click(); }")
    final = editor_text(page)
    saved(page, final)
    assert on_disk(page) == final
    assert [a.status for a in answers if a.status != 200] == []

    # a real change on disk under unsaved text still shows the conflict, and the text stays
    type_in_editor(page, "# mine\n")
    page.click("#tab-terminal")
    run_in_terminal(page, "echo '# from the terminal' >> rmsnorm.py && echo appended")
    wait_terminal_line(page, "appended")
    show_editor(page)
    page.click("#save-file")
    expect(page.locator("#editor-conflict")).to_contain_text("changed on disk since you opened it")
    assert "# mine\n" in editor_text(page) and "terminal" not in editor_text(page)
    assert on_disk(page) == final + "# from the terminal\n"


# In-page gates on fetch(): the first GET or PUT of rmsnorm.py is held until the test releases it.
# "early" sends the request at once and holds only its answer (the answer predates what the test
# does next); "late" sends it on release (the answer is what the disk says then).
GATES_JS = """(gates) => {
  const real = window.fetch.bind(window);
  window.__gates = Object.fromEntries(Object.entries(gates).map(
    ([method, when]) => [method, { when, sent: false, answered: false, release: null }]));
  window.fetch = (url, opts = {}) => {
    const gate = window.__gates[(opts.method || 'GET').toUpperCase()];
    if (!String(url).endsWith('/files/rmsnorm.py') || !gate || gate.sent) return real(url, opts);
    gate.sent = true;
    const answer = gate.when === 'early'
      ? real(url, opts).then((resp) => { gate.answered = true; return resp; }) : null;
    return new Promise((resolve, reject) => {
      gate.release = () => (answer || real(url, opts)).then(resolve, reject);
    });
  };
}"""


def release(page: Page, method: str) -> None:
    page.evaluate("(m) => window.__gates[m].release()", method)


def test_a_stale_re_read_that_lands_after_a_save_does_not_undo_it(page: Page) -> None:
    join(page)
    open_lab(page)
    open_file(page, "rmsnorm.py")
    page.evaluate(GATES_JS, {"GET": "early"})
    page.evaluate("() => { window.__reread = labEditor.revalidate(); }")  # as when the window gets focus
    page.wait_for_function("() => window.__gates.GET.answered")  # it read the file as it was
    text = f"# saved while a re-read was on its way\n{RMSNORM_SOLUTION}"
    set_text(page, text)
    page.click("#save-file")  # one save, whatever Ctrl+S does
    saved(page, text)
    release(page, "GET")  # the old content arrives after the save
    page.evaluate("() => window.__reread")
    assert editor_text(page) == text
    saved(page, text)
    type_in_editor(page, "# and again\n")  # the next save starts from the ETag of the last one
    page.keyboard.press("Control+s")
    saved(page, editor_text(page))
    assert on_disk(page) == editor_text(page)


def test_a_re_read_while_a_save_is_in_flight_is_no_conflict(page: Page) -> None:
    join(page)
    open_lab(page)
    open_file(page, "rmsnorm.py")
    page.evaluate(GATES_JS, {"GET": "late", "PUT": "early"})
    page.evaluate("() => { window.__reread = labEditor.revalidate(); }")
    page.wait_for_function("() => window.__gates.GET.sent")
    text = f"# a re-read overtakes this save\n{RMSNORM_SOLUTION}"
    set_text(page, text)
    page.click("#save-file")
    page.wait_for_function("() => window.__gates.PUT.answered")  # written on disk, answer not yet read
    release(page, "GET")  # the re-read sees the new text before the editor knows its ETag
    page.evaluate("() => window.__reread")
    expect(page.locator("#editor-conflict")).to_be_hidden()
    release(page, "PUT")
    saved(page, text)
    assert editor_text(page) == text == on_disk(page)
