"""What an attendee types the moment the terminal opens reaches the shell once, after its first
prompt: never lost, never echoed before the prompt."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.conftest import join, terminal_text, wait_terminal_line

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("no_script_errors")]

COMMAND = "echo newcomer-$((6*7))"
PROMPT = "getting-started$"

# Types into the terminal (as keystrokes do: term.input fires onData) at a chosen moment of its
# first WebSocket: as soon as it exists (before it opens), or the instant it opens (the server has
# not even started the shell then).
TYPE_EARLY_JS = """
(() => {
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      if (!String(url).includes('/terminal') || window.__typed) return;
      window.__typed = true;
      const type = () => window.term.input(%(command)s + '\\r');
      if (%(when)s === 'before-open') queueMicrotask(type);  // after lab.js has set window.term
      else this.addEventListener('open', type, { once: true });
    }
  };
})();
"""


@pytest.mark.parametrize("when", ["before-open", "on-open"])
def test_typing_as_the_terminal_opens_shows_prompt_then_command_once(page: Page, when: str) -> None:
    join(page)
    page.add_init_script(TYPE_EARLY_JS % {"command": repr(COMMAND), "when": repr(when)})
    page.goto("/labs/getting-started")
    expect(page.locator("body")).to_have_attribute("data-ws", "open", timeout=30_000)
    wait_terminal_line(page, "newcomer-42")
    wait_terminal_line(page, PROMPT)  # the prompt after the command's output
    lines = [line.rstrip() for line in terminal_text(page).splitlines() if line.strip()]
    assert lines == [f"{PROMPT} {COMMAND}", "newcomer-42", PROMPT], lines
    expect(page.locator("body")).to_have_attribute("data-term", "ready")
