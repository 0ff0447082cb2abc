"""The post-event report and verifiable completion in real Chromium, with two browser contexts: the
attendee opens a hint and finishes getting-started (real checks), then downloads a signed completion
record that verifies against the key on the event's page; the instructor opens the report page
(charts drawn, the attendee's timeline with the hint), downloads it as HTML and JSON, and the HTML
draws its charts from a file with no server at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from labserver.services.reporting import completion
from tests.e2e.conftest import (
    REPO,
    SCREENSHOTS,
    join,
    open_lab,
    run_in_terminal,
    wait_terminal,
    wait_terminal_line,
)
from tests.e2e.instructor_fixtures import instructor_page, me  # noqa: F401 (the `instructor` fixture)

pytestmark = pytest.mark.browser

LAB = "getting-started"
STEPS = ["find-device", "run-script", "write-file", "implement-rmsnorm", "read-metric"]
HELLO = "Hello, Ascend!\n你好，昇腾！\n"
SOLVE = (
    "python warmup.py >/dev/null && python measure.py | sed -n 's/^decode_step_ms = //p' > metric.txt"
    " && python device_info.py | sed -n 's/^kind: //p' > device.txt && echo SOLVED-$((40+2))"
)


def _finish_the_lab(page: Page, context: BrowserContext) -> None:
    run_in_terminal(page, SOLVE)
    wait_terminal_line(page, "SOLVED-42", timeout=60_000)
    for path, data in (
        ("notes/hello.txt", HELLO.encode()),
        ("rmsnorm.py", (REPO / "labs" / LAB / "solution" / "rmsnorm.py").read_bytes()),
    ):
        assert context.request.put(f"/api/v1/labs/{LAB}/files/{path}", data=data).ok
    for step in STEPS:
        run = context.request.post(f"/api/v1/labs/{LAB}/steps/{step}/check", timeout=120_000).json()
        assert run["status"] == "passed", run


def test_finish_download_a_record_and_read_the_report(
    page: Page, context: BrowserContext, instructor: Page, tmp_path: Path
) -> None:
    name = join(page)
    key = page.locator(".completion-key").inner_text().strip()  # the event's key, on its page
    open_lab(page, step="find-device")
    wait_terminal(page)
    expect(page.locator("#completion-record")).to_be_hidden()
    page.click("#step-find-device .step-hints summary")
    _finish_the_lab(page, context)

    page.goto(f"/labs/{LAB}")
    expect(page.locator("#completion-record")).to_be_visible()
    with page.expect_download() as dl:
        page.click("#completion-record")
    record = tmp_path / "record.json"
    dl.value.save_as(record)
    doc = json.loads(record.read_text())
    verdict = completion.verify(doc, [completion.parse_key(key)])
    assert verdict.ok, verdict.problems
    assert doc["attendee"]["name"] == name and [s["id"] for s in doc["steps"]] == STEPS
    assert doc["steps"][0]["hints_opened"] is True
    assert any(f["path"] == "device.txt" and f["sha256"] for f in doc["steps"][0]["files"])

    aid, event_id = me(page)
    instructor.goto(f"/instructor/events/{event_id}/report")
    expect(instructor.locator("body")).to_have_attribute("data-charts", "ready", timeout=15_000)
    funnel = instructor.locator(f'canvas[data-chart="funnel"][data-lab="{LAB}"]')
    passed = instructor.evaluate("(c) => c.chart.data.datasets[1].data", funnel.element_handle())
    assert len(passed) == len(STEPS) and min(passed) >= 1
    timeline = instructor.locator(f'details.timeline[data-attendee="{aid}"]')
    timeline.locator("summary").click()
    expect(timeline.locator("tr.entry.hints")).to_have_count(1)
    expect(timeline.locator("summary")).to_contain_text(LAB)  # finished
    expect(instructor.locator(".completion-key").first).to_have_text(key)
    instructor.screenshot(path=str(SCREENSHOTS / "instructor-report.png"), full_page=True)

    with instructor.expect_download() as dl_json:
        instructor.click("#report-json")
    data = json.loads(Path(dl_json.value.path()).read_text())
    (lab,) = [lab for lab in data["labs"] if lab["id"] == LAB]
    assert lab["finished"] >= 1 and lab["steps"][0]["hints_opened"] >= 1
    with instructor.expect_download() as dl_html:
        instructor.click("#report-html")
    html = tmp_path / "report.html"
    dl_html.value.save_as(html)

    offline = instructor.context.new_page()
    offline.route(
        "**/*",
        lambda route: route.abort() if not route.request.url.startswith("file:") else route.continue_(),
    )
    offline.goto(html.as_uri())
    expect(offline.locator("body")).to_have_attribute("data-charts", "ready", timeout=15_000)
    expect(offline.locator(f'details.timeline[data-attendee="{aid}"]')).to_have_count(1)
    offline.close()


def test_an_attendee_cannot_open_the_report(page: Page) -> None:
    join(page)
    _aid, event_id = me(page)
    for url in (f"/api/v1/events/{event_id}/report.json", f"/api/v1/events/{event_id}/report.html"):
        assert page.context.request.get(url).status == 403
    page.goto(f"/instructor/events/{event_id}/report")
    expect(page).to_have_url(
        f"{page.url.split('/instructor')[0]}/instructor/login?next=/instructor/events/{event_id}/report"
    )
