"""Every string of the instructor's pages has a Simplified Chinese translation in instructor.po."""

from __future__ import annotations

from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from labserver.i18n import LOCALE_DIR
from tests.conftest import REPO

MAPPING = [
    ("labserver/routes/instructor/*.py", "python"),
    ("web/templates/instructor*.html", "jinja2"),
    ("web/templates/_instructor*.html", "jinja2"),
]


def extracted() -> set[str]:
    found = set()
    for _file, _line, message, _comments, _context in extract_from_dir(
        str(REPO), MAPPING, options_map={"**.html": {"extensions": "jinja2.ext.i18n"}}, keywords={"_": None}
    ):
        if isinstance(message, str) and message:
            found.add(message)
    return found


def test_every_instructor_string_is_translated() -> None:
    with (LOCALE_DIR / "zh" / "LC_MESSAGES" / "instructor.po").open("rb") as f:
        catalog = read_po(f, locale="zh")
    strings = extracted()
    assert len(strings) > 100
    missing = sorted(s for s in strings if not (catalog.get(s) and catalog.get(s).string))
    assert missing == []
