"""A table a checker attaches to its verdict (agent-deploy's step 7 shows the attendee's own decision
log that way) is shown in Chromium cell by cell as text: the attendee's markup never becomes markup,
in English and in Chinese. The fixture lab ``decision-log`` (conftest) quotes ``log.txt``."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from .conftest import check, join, open_lab

HOSTILE_LOG = (
    "<img src=x onerror=\"document.title='owned'\">|**accept**\n"
    "mtp|<script>document.title='owned'</script>\n"
    "graph-mode|拒绝 (rolled back)\n"
)


def write_log(page: Page) -> None:
    resp = page.request.put("/api/v1/labs/decision-log/files/log.txt", data=HOSTILE_LOG)
    assert resp.ok, resp.text()


def test_a_checker_table_shows_the_attendees_hostile_text_as_written(page: Page) -> None:
    join(page)
    open_lab(page, "decision-log")
    write_log(page)
    check(page, "review", "failed")
    result = page.locator("#step-review .check-result")
    expect(result.locator(".result-message")).to_have_text("review the log")
    table = result.locator("table.result-table")
    expect(table.locator("caption")).to_have_text("Your decision log")
    expect(table.locator("thead th")).to_have_text(["skill", "decision"])
    cells = table.locator("tbody tr")
    expect(cells).to_have_count(3)
    expect(cells.nth(0).locator("td")).to_have_text(
        ["<img src=x onerror=\"document.title='owned'\">", "**accept**"]
    )
    expect(cells.nth(1).locator("td")).to_have_text(["mtp", "<script>document.title='owned'</script>"])
    expect(cells.nth(2).locator("td")).to_have_text(["graph-mode", "拒绝 (rolled back)"])
    # nothing the attendee wrote became an element, and nothing of it ran
    assert table.locator("img, script, strong").count() == 0
    assert page.title() != "owned"


def test_a_checker_table_follows_the_page_language(page: Page) -> None:
    join(page)
    open_lab(page, "decision-log")
    page.click('.lang-switch a[lang="zh"]')
    expect(page.locator("#check-button")).to_have_text("检查")
    write_log(page)
    check(page, "review", "failed")
    table = page.locator("#step-review .check-result table.result-table")
    expect(table.locator("caption")).to_have_text("你的决策日志")
    expect(table.locator("thead th")).to_have_text(["技能", "决定"])
    expect(table.locator("tbody tr").nth(2).locator("td")).to_have_text(["graph-mode", "拒绝 (rolled back)"])
    expect(page.locator("#step-review .result-message")).to_have_text("请审阅日志")
