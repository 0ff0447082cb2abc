"""The attendee's workshop in real Chromium: join, lab list, terminal, editor, Check, restart,
reconnect, language, raise hand, announcements, reset. Screenshots go to docs/img/."""

from __future__ import annotations

import re
import zipfile

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.e2e.conftest import (
    INSTRUCTOR_TOKEN,
    RMSNORM_SOLUTION,
    SCREENSHOTS,
    LiveServer,
    check,
    editor_text,
    join,
    open_file,
    open_lab,
    run_in_terminal,
    select_step,
    show_editor,
    terminal_text,
    type_in_editor,
    wait_terminal,
    wait_terminal_line,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("no_script_errors")]


def test_wrong_code_shows_the_servers_message_in_english_then_chinese(page: Page) -> None:
    page.goto("/join")
    page.screenshot(path=str(SCREENSHOTS / "attendee-join.png"))
    page.fill("#event-code", "NOPE99")
    page.fill("#display-name", "Wrong Code")
    page.click("#join-form button[type=submit]")
    expect(page.locator("#join-error")).to_contain_text("No event has this code")
    page.click('.lang-switch a[lang="zh"]')
    expect(page.locator("h1")).to_have_text("加入工作坊")
    page.fill("#event-code", "NOPE99")
    page.fill("#display-name", "Wrong Code")
    page.click("#join-form button[type=submit]")
    expect(page.locator("#join-error")).to_contain_text("没有这个活动码对应的活动")
    expect(page).to_have_url(re.compile(r"/join"))


def test_lab_list_shows_progress_and_broken_labs_as_unavailable(page: Page) -> None:
    join(page)
    card = page.locator('.lab-card[data-lab="getting-started"]')
    expect(card.locator(".progress-count")).to_contain_text("0/5 passed")
    broken = page.locator('.lab-card.unavailable[data-lab="broken-lab"]')
    expect(broken).to_contain_text("Unavailable")
    expect(broken).to_contain_text("stepz")
    page.screenshot(path=str(SCREENSHOTS / "attendee-labs.png"))
    card.locator("h2 a").click()
    expect(page).to_have_url(re.compile(r"/labs/getting-started$"))
    wait_terminal(page)


def test_terminal_editor_check_flow_survives_a_server_restart(page: Page, server: LiveServer) -> None:
    join(page)
    open_lab(page)

    # the terminal is a real shell in the lab folder
    run_in_terminal(page, "echo hello")
    wait_terminal_line(page, "hello")

    # step 3: a new file in the editor, saved with Ctrl+S; the check fails with the checker's message
    select_step(page, "write-file")
    show_editor(page)
    expect(page.locator('#file-tree button.file[data-path="rmsnorm.py"]')).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept("notes/hello.txt"))
    page.click("#new-file")
    expect(page.locator("#editor-path")).to_have_text("notes/hello.txt")
    type_in_editor(page, "Hello, Ascend!\n")
    expect(page.locator("#editor-dirty")).to_be_visible()
    page.keyboard.press("Control+s")
    expect(page.locator("#editor-status")).to_have_text("Saved")
    expect(page.locator("#editor-dirty")).to_be_hidden()
    expect(page.locator('#file-tree button.file[data-path="notes/hello.txt"]')).to_be_visible()
    check(page, "write-file", "failed")
    result = page.locator("#step-write-file .check-result")
    expect(result).to_contain_text("The file has 1 line(s); it needs two")
    expect(result).to_contain_text("full-width")  # the checker's hint
    expect(page.locator("#check-status")).to_have_text("Not yet")

    # fix it, save with the button, check passes
    type_in_editor(page, "你好，昇腾！\n")
    page.click("#save-file")
    expect(page.locator("#editor-status")).to_have_text("Saved")
    check(page, "write-file", "passed")
    expect(result).to_contain_text("notes/hello.txt is exactly right.")
    expect(page.locator('.step-chip[data-step="write-file"]')).to_have_class(re.compile("status-passed"))
    expect(page.locator("#lab-progress")).to_contain_text("1/5 passed")
    expect(page.locator("#step-write-file .history-list li")).to_have_count(2)

    # step 4: implement a function; the checker imports it in a child process
    select_step(page, "implement-rmsnorm")
    open_file(page, "rmsnorm.py")
    check(page, "implement-rmsnorm", "failed")
    expect(page.locator("#step-implement-rmsnorm .check-result .result-message")).to_contain_text("rms_norm")
    page.evaluate("(text) => labEditor.cm.setValue(text)", RMSNORM_SOLUTION)
    page.locator(".CodeMirror textarea").focus()
    page.keyboard.press("Control+s")
    expect(page.locator("#editor-status")).to_have_text("Saved")
    check(page, "implement-rmsnorm", "passed")
    expect(page.locator("#step-implement-rmsnorm .check-result")).to_contain_text("matches npu_rms_norm")
    expect(page.locator("#lab-progress")).to_contain_text("2/5 passed")
    page.screenshot(path=str(SCREENSHOTS / "attendee-editor.png"))
    page.click("#tab-terminal")
    run_in_terminal(page, "cat notes/hello.txt")
    wait_terminal_line(page, "你好，昇腾！")
    page.screenshot(path=str(SCREENSHOTS / "attendee-lab.png"))

    # restart the server process on the same data folder: the open page reconnects by itself
    connects = int(page.locator("body").get_attribute("data-ws-connects") or "0")
    server.restart()
    expect(page.locator("body")).to_have_attribute("data-ws-connects", str(connects + 1), timeout=30_000)
    expect(page.locator("body")).to_have_attribute("data-ws", "open")

    # reload: progress, history and the workspace are intact
    page.goto("/labs/getting-started?step=write-file")
    wait_terminal(page)
    expect(page.locator("#lab-progress")).to_contain_text("2/5 passed")
    expect(page.locator('.step-chip[data-step="write-file"]')).to_have_class(re.compile("status-passed"))
    expect(page.locator('.step-chip[data-step="implement-rmsnorm"]')).to_have_class(
        re.compile("status-passed")
    )
    expect(page.locator("#step-write-file .history-list li")).to_have_count(2)
    expect(page.locator("#step-write-file .check-result")).to_have_attribute("data-status", "passed")
    open_file(page, "notes/hello.txt")
    assert editor_text(page) == "Hello, Ascend!\n你好，昇腾！\n"
    open_file(page, "rmsnorm.py")
    assert editor_text(page) == RMSNORM_SOLUTION
    page.click("#tab-terminal")
    run_in_terminal(page, "head -1 notes/hello.txt")
    wait_terminal_line(page, "Hello, Ascend!")


def test_terminal_reconnect_keeps_the_same_shell(page: Page) -> None:
    join(page)
    open_lab(page)
    run_in_terminal(page, "MARK=kept-$((6*7)); echo set-$MARK")
    wait_terminal_line(page, "set-kept-42")
    expect(page.locator("body")).to_have_attribute("data-ws-connects", "1")
    page.evaluate("() => labTerminal.drop()")  # the socket goes away as in a network blip
    expect(page.locator("body")).to_have_attribute("data-ws-connects", "2", timeout=15_000)
    expect(page.locator("body")).to_have_attribute("data-ws", "open")
    wait_terminal_line(page, "set-kept-42")  # scrollback replayed on re-attach
    run_in_terminal(page, "echo got-$MARK")
    wait_terminal_line(page, "got-kept-42")  # the variable lives: same shell
    assert terminal_text(page).count("got-kept-42") == 1


def test_terminal_follows_the_window_size(page: Page) -> None:
    join(page)
    open_lab(page)
    cols_wide = page.evaluate("() => term.cols")
    page.set_viewport_size({"width": 1000, "height": 700})
    page.wait_for_function("(before) => term.cols < before", arg=cols_wide)
    run_in_terminal(page, "echo cols=$(tput cols)")
    cols = page.evaluate("() => term.cols")
    wait_terminal_line(page, f"cols={cols}")  # the shell's PTY got the new size


def test_language_switch_shows_chinese(page: Page) -> None:
    join(page)
    open_lab(page)
    page.click('.lang-switch a[lang="zh"]')
    wait_terminal(page)
    expect(page.locator("#check-button")).to_have_text("检查")
    expect(page.locator("#step-find-device .step-title")).to_have_text("找到你的设备")
    expect(page.locator("#tab-terminal")).to_have_text("终端")
    expect(page.locator("#step-find-device .markdown")).to_contain_text("在终端运行")
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    page.screenshot(path=str(SCREENSHOTS / "attendee-lab-zh.png"))
    page.goto("/labs")  # the choice is kept in a cookie
    expect(page.locator('.lab-card[data-lab="getting-started"] .progress-count')).to_contain_text(
        "已通过 0/5"
    )
    page.click('.lang-switch a[lang="en"]')
    expect(page.locator("h1")).to_have_text("Labs")


def test_editor_keeps_unsaved_text_across_files_and_conflicts(page: Page) -> None:
    join(page)
    open_lab(page)
    open_file(page, "rmsnorm.py")
    type_in_editor(page, "# mine\n")
    expect(page.locator('#file-tree button.file[data-path="rmsnorm.py"]')).to_have_class(re.compile("dirty"))
    open_file(page, "warmup.py")  # switching files keeps the unsaved text
    open_file(page, "rmsnorm.py")
    assert editor_text(page).startswith("# mine\n")
    expect(page.locator("#editor-dirty")).to_be_visible()

    # the file changes on disk meanwhile: saving is refused with the server's message, text kept
    page.click("#tab-terminal")
    run_in_terminal(page, "echo '# from the terminal' >> rmsnorm.py && echo appended")
    wait_terminal_line(page, "appended")
    show_editor(page)
    expect(page.locator("#editor-conflict")).to_be_visible()  # noticed when the tab came back
    page.click("#save-file")
    expect(page.locator("#editor-conflict")).to_contain_text("changed on disk since you opened it")
    assert editor_text(page).startswith("# mine\n")
    page.click("#editor-conflict .conflict-overwrite")
    expect(page.locator("#editor-status")).to_have_text("Saved")
    expect(page.locator("#editor-conflict")).to_be_hidden()
    page.click("#tab-terminal")
    run_in_terminal(page, "head -1 rmsnorm.py; grep -c 'from the terminal' rmsnorm.py")
    wait_terminal_line(page, "# mine")
    wait_terminal_line(page, "0")

    # unsaved text asks before the page goes away
    show_editor(page)
    type_in_editor(page, "# more\n")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.type), d.dismiss()))
    page.close(run_before_unload=True)
    if not dialogs:
        page.wait_for_event("dialog")
    assert dialogs == ["beforeunload"], dialogs
    # dismissed: the page stays, text and all. Asking it so also waits until it has handled the
    # dismissal; closing the context while that is still in flight crashed Chromium 156 about
    # one time in ten (BrowserContext.close: "Target page, context or browser has been closed")
    expect(page.locator("body")).to_have_attribute("data-editor-dirty", "true")


def test_run_in_terminal_button_and_reset_with_backup(page: Page) -> None:
    join(page)
    open_lab(page, step="write-file")
    page.click("#step-write-file button.run-in-terminal")
    check(page, "write-file", "passed")
    show_editor(page)
    expect(page.locator('#file-tree button.file[data-path="notes/hello.txt"]')).to_be_visible()

    with page.expect_download() as download_info:
        page.click("#download-lab")
    download = download_info.value
    assert download.suggested_filename == "getting-started.zip"
    with zipfile.ZipFile(download.path()) as archive:
        names = archive.namelist()
        assert "getting-started/notes/hello.txt" in names, names
        assert archive.read("getting-started/notes/hello.txt").decode() == "Hello, Ascend!\n你好，昇腾！\n"

    page.click("#reset-lab")
    expect(page.locator("#reset-dialog")).to_be_visible()
    page.click("#reset-confirm")
    expect(page.locator("#reset-result")).to_contain_text(".backups/")
    backup = page.locator("#reset-result").get_attribute("data-backup") or ""
    assert backup.startswith(".backups/") and backup.endswith("/getting-started")
    expect(page.locator('#file-tree button.file[data-path="notes/hello.txt"]')).to_have_count(0)
    # results stay; the terminal comes back with a new shell in the fresh folder
    expect(page.locator('.step-chip[data-step="write-file"]')).to_have_class(re.compile("status-passed"))
    page.click("#tab-terminal")
    expect(page.locator("body")).to_have_attribute("data-ws-connects", "2", timeout=15_000)
    expect(page.locator("body")).to_have_attribute("data-ws", "open")
    run_in_terminal(page, f"cat ../{backup}/notes/hello.txt | head -1; ls notes 2>/dev/null | wc -l")
    wait_terminal_line(page, "Hello, Ascend!")


def test_raise_hand_then_someone_is_coming_and_announcements(page: Page, context: BrowserContext) -> None:
    join(page)
    open_lab(page)
    expect(page.locator("body")).to_have_attribute("data-live", "ready")
    page.click("#help-button")
    expect(page.locator("#help-status")).to_contain_text("Hand raised")
    me = context.request.get("/api/v1/me").json()
    event_id = me["event"]["id"]
    auth = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
    mine = context.request.get("/api/v1/help").json()
    claim = context.request.post(f"/api/v1/events/{event_id}/help/{mine['id']}/claim", headers=auth)
    assert claim.ok, claim.text()
    expect(page.locator("#help-status")).to_contain_text("is coming to help you")
    expect(page.locator("body")).to_have_attribute("data-help", "claimed")

    sent = context.request.post(
        f"/api/v1/events/{event_id}/announcements", headers=auth, data={"message": "Break until 15:30"}
    )
    assert sent.ok, sent.text()
    expect(page.locator("#announcement")).to_be_visible()
    expect(page.locator("#announcement .announcement-text")).to_have_text("Break until 15:30")
    page.click("#announcement .announcement-close")
    expect(page.locator("#announcement")).to_be_hidden()

    page.click("#help-button")  # lower the hand
    expect(page.locator("#help-status")).to_be_hidden()


@pytest.mark.parametrize("size", [(1366, 768), (2560, 1440)])
def test_lab_page_layout_fits_the_screen(page: Page, size: tuple[int, int]) -> None:
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    join(page)
    open_lab(page)
    instructions = page.locator(".instructions").bounding_box()
    workbench = page.locator(".workbench").bounding_box()
    check_button = page.locator("#check-button").bounding_box()
    assert instructions and workbench and check_button
    assert instructions["x"] == 0 and workbench["x"] >= instructions["x"] + instructions["width"] - 1
    assert workbench["x"] + workbench["width"] <= width + 1  # no horizontal overflow
    assert check_button["y"] + check_button["height"] <= height  # Check is visible without scrolling
    assert page.evaluate("() => document.documentElement.scrollHeight") <= height
    assert page.evaluate("() => term.rows") >= 20
    editor_panel, terminal_panel = page.locator("#panel-editor"), page.locator("#panel-terminal")
    if width > 2000:  # wide screens show the editor above the terminal
        expect(page.locator("#split-toggle")).to_have_attribute("aria-pressed", "true")
        expect(editor_panel).to_be_visible()
        expect(terminal_panel).to_be_visible()
        page.click('#file-tree button.file[data-path="rmsnorm.py"]')
        expect(page.locator("#editor-path")).to_have_text("rmsnorm.py")
        page.screenshot(path=str(SCREENSHOTS / "attendee-lab-wide.png"))
        page.click("#split-toggle")
        expect(editor_panel).to_be_hidden()
        expect(terminal_panel).to_be_visible()
    else:  # tabs at 1366x768; split view on request
        expect(page.locator("#split-toggle")).to_have_attribute("aria-pressed", "false")
        expect(editor_panel).to_be_hidden()
        rows_alone = page.evaluate("() => term.rows")
        page.click("#split-toggle")
        expect(editor_panel).to_be_visible()
        expect(terminal_panel).to_be_visible()
        page.wait_for_function("(rows) => term.rows < rows", arg=rows_alone)  # the terminal refits
        page.click("#split-toggle")
        expect(editor_panel).to_be_hidden()


def test_steps_the_instructor_opens_appear_without_a_reload(page: Page, context: BrowserContext) -> None:
    join(page)
    open_lab(page, step="write-file")
    expect(page.locator("body")).to_have_attribute("data-live", "ready")
    event_id = context.request.get("/api/v1/me").json()["event"]["id"]
    auth = {"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"}
    pace = f"/api/v1/events/{event_id}/pace"
    try:
        assert context.request.put(pace, headers=auth, data={"lab": "getting-started", "unlocked": 2}).ok
        article = page.locator("#step-write-file")
        expect(article).to_have_attribute("data-locked", "true")
        expect(article.locator(".locked-note")).to_be_visible()
        expect(page.locator("#check-button")).to_be_disabled()
        expect(page.locator('.step-chip[data-step="write-file"]')).to_have_class(re.compile("locked"))
        assert context.request.put(pace, headers=auth, data={"lab": "getting-started", "unlocked": None}).ok
        expect(article).to_have_attribute("data-locked", "false")
        expect(article.locator("button.run-in-terminal")).to_be_visible()
        expect(article.locator(".step-hints summary")).to_contain_text("Hints (1)")
        expect(page.locator("#check-button")).to_be_enabled()
    finally:
        context.request.put(pace, headers=auth, data={"lab": "getting-started", "unlocked": None})


def test_a_solution_the_instructor_reveals_shows_up_in_the_editor(
    page: Page, context: BrowserContext
) -> None:
    join(page)
    open_lab(page, step="implement-rmsnorm")
    expect(page.locator("body")).to_have_attribute("data-live", "ready")
    me = context.request.get("/api/v1/me").json()
    url = f"/api/v1/events/{me['event']['id']}/attendees/{me['attendee']['id']}/reveal"
    resp = context.request.post(
        url,
        headers={"Authorization": f"Bearer {INSTRUCTOR_TOKEN}"},
        data={"lab": "getting-started", "step": "implement-rmsnorm"},
    )
    assert resp.ok, resp.text()
    expect(page.locator("#toast")).to_contain_text(".solution/rmsnorm.py")
    show_editor(page)
    open_file(page, ".solution/rmsnorm.py")
    assert "rsqrt" in editor_text(page)


def test_a_check_from_another_tab_updates_this_page_live(page: Page, context: BrowserContext) -> None:
    join(page)
    open_lab(page, step="write-file")
    expect(page.locator("body")).to_have_attribute("data-live", "ready")
    other = context.new_page()
    try:
        other.goto("/labs/getting-started?step=write-file")
        wait_terminal(other)
        run_in_terminal(
            other,
            "mkdir -p notes && printf 'Hello, Ascend!\\n\\u4f60\\u597d\\uff0c\\u6607\\u817e\\uff01\\n' > notes/hello.txt && echo written",
        )
        wait_terminal_line(other, "written")
        check(other, "write-file", "passed")
    finally:
        other.close()
    expect(page.locator('.step-chip[data-step="write-file"]')).to_have_class(re.compile("status-passed"))
    expect(page.locator("#lab-progress")).to_contain_text("1/5 passed")
    expect(page.locator("#step-write-file .check-result")).to_have_attribute("data-status", "passed")
    expect(page.locator("#step-write-file .history-list li")).to_have_count(1)


MAKE_MEDIA = (
    'python -c "import numpy as np, imageio.v2 as iio; '
    "f=[np.full((32,32,3),(i*30)%255,np.uint8) for i in range(8)]; "
    "iio.mimwrite('clip.mp4', f, fps=8, codec='libx264', macro_block_size=1); "
    "iio.imwrite('frame.png', f[3])\" && echo media-made"
)


def test_generated_video_and_image_preview_in_the_editor(page: Page) -> None:
    join(page)
    open_lab(page)
    run_in_terminal(page, MAKE_MEDIA)
    wait_terminal_line(page, "media-made")
    show_editor(page)
    page.click("#refresh-files")
    open_file(page, "clip.mp4")
    expect(page.locator("#media-preview video")).to_be_visible()
    page.wait_for_function("() => document.querySelector('#media-preview video').videoWidth === 32")
    expect(page.locator(".CodeMirror")).to_be_hidden()
    expect(page.locator("#save-file")).to_be_disabled()
    page.screenshot(path=str(SCREENSHOTS / "attendee-media-preview.png"))
    open_file(page, "frame.png")
    page.wait_for_function("() => document.querySelector('#media-preview img').naturalWidth === 32")
    open_file(page, "rmsnorm.py")  # back to text: the editor returns, the preview goes
    expect(page.locator(".CodeMirror")).to_be_visible()
    expect(page.locator("#media-preview")).to_be_hidden()
