"""docs/labkit.md documents every emulation constant, with the values the code uses."""

from __future__ import annotations

import re
from pathlib import Path

from labkit import emu
from labkit.emu.profiles import constants_table

DOC = Path(__file__).resolve().parents[3] / "docs" / "labkit.md"


def _doc() -> str:
    assert DOC.exists(), f"{DOC} is missing"
    return DOC.read_text(encoding="utf-8")


def test_constants_table_in_the_docs_matches_the_profiles():
    text = _doc()
    start, end = "<!-- constants-table:start -->", "<!-- constants-table:end -->"
    assert start in text and end in text, "docs/labkit.md lost the constants-table markers"
    table = text.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == constants_table(), (
        "the constants table in docs/labkit.md is stale; paste labkit.emu.profiles.constants_table()"
    )


def test_every_constant_has_a_source_and_a_known_marker():
    markers = {"V", "V-secondary", "UNVERIFIED", "DERIVED", "ASSUMED"}
    for name in emu.profile_names():
        for key, c in emu.get_profile(name).constants().items():
            assert c.marker in markers, (name, key, c.marker)
            assert len(c.source) > 10, (name, key)
            assert c.value > 0, (name, key)


def test_emulation_and_model_sections_exist():
    text = _doc()
    assert "## Emulated device" in text and "## Tiny models" in text
    for name in emu.profile_names():
        assert f"`{name}`" in text, name
    for api in ("account(", "session(", "current()", "OutOfDeviceMemory", "host_compute", "to_json()"):
        assert api in text, api


def test_the_python_examples_in_both_sections_run():
    text = _doc()
    section = text[text.index("## Emulated device") :]
    nxt = re.search(r"^## (?!Emulated device|Tiny models)", section[3:], re.M)
    if nxt:
        section = section[: nxt.start() + 3]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        exec(compile(block, "docs/labkit.md", "exec"), {})
