"""Browser tests: real Chromium (Debian's, through Playwright's ``executable_path``) against a real
``labserver serve`` in a subprocess, so a test can restart the server on the same data folder.

Run them in their own pytest invocation (``pytest tests/e2e``): after a Playwright sync test, async
tests in the same process fail (see the browser-tests recipe). A missing Chromium fails the run."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

REPO = Path(__file__).resolve().parents[2]
EVENT_CODE = "E2ECODE"
INSTRUCTOR_TOKEN = "e2e-instructor-token"
# screenshots for the docs: written to docs/img/ only when asked (`make screenshots`), else to
# test-results/ so a test run leaves the checkout clean
SCREENSHOTS = (
    Path(os.environ["LABSERVER_SCREENSHOTS"])
    if os.environ.get("LABSERVER_SCREENSHOTS")
    else (REPO / "test-results" / "screenshots")
)
SCREENSHOTS.mkdir(parents=True, exist_ok=True)

CHROMIUM = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1, EXCLUDE localhost",  # no DNS: no CDN either
]

BROKEN_LAB_YAML = """\
id: broken-lab
title: "A broken lab"
summary: "lab.yaml has a typo"
duration_min: 10
stepz: []
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """``labserver serve`` in a subprocess; ``restart()`` keeps the port and the data folder."""

    def __init__(self, root: Path, serve_args: list[str] | None = None) -> None:
        self.root = root
        self.serve_args = serve_args or []  # more arguments of `labserver serve` (e.g. --dev LAB)
        self.data_dir = root / "data"
        self.labs_dir = root / "labs"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "LABSERVER_DATA_DIR": str(self.data_dir),
            "LABSERVER_LABS_DIR": str(self.labs_dir),
            "LABSERVER_WEB_DIR": str(REPO / "web"),
            "LABSERVER_DEFAULT_EVENT_CODE": EVENT_CODE,
            "LABSERVER_INSTRUCTOR_TOKEN": INSTRUCTOR_TOKEN,
            "LABSERVER_BACKEND": "local",
            "PYTHONUNBUFFERED": "1",
        }

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *("-m", "labserver.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)),
                *self.serve_args,
            ],
            cwd=self.root,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"labserver serve exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"labserver serve did not answer /healthz in 60 s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""


DECISION_LOG_LAB_YAML = """\
id: decision-log
order: 90
title: {en: "A decision log", zh: "决策日志"}
summary: {en: "A checker that shows the attendee's own log as a table", zh: "检查器把学员自己的日志显示成表格"}
duration_min: 5
steps:
  - id: review
    title: {en: "Review the log", zh: "审阅日志"}
    file: steps/review.md
    check: checks/review.py
"""
#: quotes ``log.txt`` (``skill|decision`` per line) as a table, its title in the page's language,
#: like agent-deploy's step 7 shows the attendee's decision log
DECISION_LOG_CHECKER = """\
from pathlib import Path

from labkit.check import Failure, main, msg, table


def check():
    rows = [line.split("|") for line in Path("log.txt").read_text().splitlines()]
    table(msg("Your decision log", "你的决策日志"), [msg("skill", "技能"), msg("decision", "决定")], rows)
    raise Failure(msg("review the log", "请审阅日志"))


main(check)
"""


def write_decision_log_lab(lab: Path) -> None:
    """A one-step lab whose checker attaches the attendee's ``log.txt`` as a table."""
    for folder in ("steps", "checks", "starter"):
        (lab / folder).mkdir(parents=True)
    (lab / "lab.yaml").write_text(DECISION_LOG_LAB_YAML)
    (lab / "steps" / "review.md").write_text("Write `log.txt`, then press Check.\n")
    (lab / "steps" / "review.zh.md").write_text("写好 `log.txt`，然后点击检查。\n")
    (lab / "checks" / "review.py").write_text(DECISION_LOG_CHECKER)
    (lab / "starter" / "log.txt").write_text("fused-ops|accept\n")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("e2e")
    labs = root / "labs"
    labs.mkdir()
    shutil.copytree(
        REPO / "labs" / "getting-started",
        labs / "getting-started",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    # a lab that loads on the first start (so the default event lists it), then gets broken by an
    # edit: after a restart the server must show it as unavailable instead of failing
    shutil.copytree(labs / "getting-started", labs / "broken-lab")
    spec = (labs / "broken-lab" / "lab.yaml").read_text()
    (labs / "broken-lab" / "lab.yaml").write_text(spec.replace("id: getting-started", "id: broken-lab", 1))
    write_decision_log_lab(labs / "decision-log")
    srv = LiveServer(root)
    srv.start()
    (labs / "broken-lab" / "lab.yaml").write_text(BROKEN_LAB_YAML)
    srv.restart()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def base_url(server: LiveServer) -> str:
    return server.url


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:  # extends pytest-playwright's
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium fonts-dejavu-core", pytrace=False)
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1366, "height": 768}, "locale": "en-US"}


@pytest.fixture(scope="session", autouse=True)
def screenshots_dir() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


_names = iter(range(1, 10_000))


def unique_name(prefix: str = "Tester") -> str:
    return f"{prefix} {os.getpid()}-{next(_names)}"


def join(page: Page, name: str | None = None, code: str = EVENT_CODE) -> str:
    """Join through the join page; ends on the lab list."""
    name = name or unique_name()
    page.goto("/join")
    page.fill("#event-code", code)
    page.fill("#display-name", name)
    page.click("#join-form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/labs$"))
    return name


def open_lab(page: Page, lab: str = "getting-started", step: str = "") -> None:
    page.goto(f"/labs/{lab}" + (f"?step={step}" if step else ""))
    wait_terminal(page)


def wait_terminal(page: Page) -> None:
    expect(page.locator("body")).to_have_attribute("data-ws", "open", timeout=30_000)
    expect(page.locator(".xterm-rows")).to_contain_text("$", timeout=30_000)


BUFFER_JS = """() => { const b = term.buffer.active, out = [];
  for (let i = 0; i < b.length; i++) out.push(b.getLine(i).translateToString(true));
  return out.join('\\n'); }"""


def terminal_text(page: Page) -> str:
    return str(page.evaluate(BUFFER_JS))


def run_in_terminal(page: Page, command: str) -> None:
    page.locator(".xterm-helper-textarea").focus()
    page.keyboard.type(command)
    page.keyboard.press("Enter")


def wait_terminal_line(page: Page, text: str, timeout: float = 20_000) -> None:
    page.wait_for_function(
        """(want) => { const b = term.buffer.active;
          for (let i = 0; i < b.length; i++) if (b.getLine(i).translateToString(true).trim() === want) return true;
          return false; }""",
        arg=text,
        timeout=timeout,
    )


# ---- attendee pages: scripts, steps, the editor -----------------------------------------------


@pytest.fixture
def no_script_errors(page: Page) -> Iterator[None]:
    """Any uncaught exception in the page's scripts fails the test."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield
    assert not errors, errors


CHECK_TIMEOUT = 90_000  # a check starts Python (and torch for step 4) on a shared 2-core machine

RMSNORM_SOLUTION = """import torch


def rms_norm(x, weight, eps=1e-6):
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype), rstd
"""


def select_step(page: Page, step: str) -> None:
    page.click(f'.step-chip[data-step="{step}"]')
    expect(page.locator(f"#step-{step}")).to_be_visible()


def show_editor(page: Page) -> None:
    page.click("#tab-editor")
    expect(page.locator("#panel-editor")).to_be_visible()


def open_file(page: Page, path: str) -> None:
    show_editor(page)
    page.click(f'#file-tree button.file[data-path="{path}"]')
    expect(page.locator("#editor-path")).to_have_text(path)


def type_in_editor(page: Page, text: str) -> None:
    page.locator(".CodeMirror textarea").focus()
    page.keyboard.insert_text(text)


def editor_text(page: Page) -> str:
    return str(page.evaluate("() => labEditor.cm.getValue()"))


def check(page: Page, step: str, status: str) -> None:
    page.click("#check-button")
    result = page.locator(f"#step-{step} .check-result")
    expect(result).to_have_attribute("data-status", status, timeout=CHECK_TIMEOUT)
