"""`labserver export-site DIR`: static HTML of every lab, both languages, relative links only."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

from labserver.content import LabCatalog
from labserver.content.site_export import export_site
from tests.selfpaced.conftest import REPO


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []  # (tag, attr, value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.links.append((tag, name, value))


def _links(page: Path) -> list[tuple[str, str, str]]:
    parser = Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.links


def test_every_lab_and_step_in_both_languages(tmp_path: Path) -> None:
    catalog = LabCatalog(REPO / "labs")
    assert catalog.labs, "no labs to export"
    pages = export_site(catalog, tmp_path / "site")
    site = tmp_path / "site"
    assert (site / "style.css").is_file()
    for lab in catalog:
        for step in lab.steps:
            en = site / lab.id / f"{step.id}.html"
            zh = site / lab.id / f"{step.id}.zh.html"
            assert en in pages and zh in pages
            assert html.escape(step.spec.title.get("en"), quote=False) in en.read_text(encoding="utf-8")
            zh_text = zh.read_text(encoding="utf-8")
            assert '<html lang="zh-CN">' in zh_text
            assert html.escape(step.spec.title.get("zh"), quote=False) in zh_text
            if step.markdown_zh is not None:  # the Chinese instructions, not the English ones
                first_zh_line = next(
                    ln
                    for ln in step.markdown_zh.read_text(encoding="utf-8").splitlines()
                    if ln.startswith("#")
                )
                assert html.escape(first_zh_line.lstrip("# ").strip(), quote=False) in zh_text
            assert "run-in-terminal" not in en.read_text(encoding="utf-8")
            assert f"labserver check {lab.id} {step.id}" in zh_text


def test_links_are_relative_and_resolve(tmp_path: Path) -> None:
    site = tmp_path / "site"
    export_site(LabCatalog(REPO / "labs"), site)
    html_pages = sorted(site.rglob("*.html"))
    checked = 0
    for page in html_pages:
        for tag, attr, value in _links(page):
            parts = urlsplit(value)
            loads_something = tag in ("link", "img", "script") or attr == "src"
            if parts.scheme or value.startswith("//"):
                # no page loads anything from a host; plain <a> links out are allowed
                assert not loads_something, f"{page}: {tag} {attr}={value} loads from the network"
                continue
            assert not value.startswith("/"), f"{page}: absolute link {value}"
            if not parts.path:
                continue
            target = (page.parent / parts.path).resolve()
            assert target.is_file(), f"{page.relative_to(site)}: {value} -> missing {target}"
            checked += 1
    assert checked > 4 * len(html_pages)  # nav, language switch, pager, stylesheet on every page


def test_step_links_and_assets_are_rewritten(tmp_path: Path) -> None:
    """A lab whose steps link to each other's Markdown and show an image beside them."""
    labs = tmp_path / "labs"
    lab = labs / "tiny"
    (lab / "steps").mkdir(parents=True)
    (lab / "checks").mkdir()
    (lab / "starter").mkdir()
    (lab / "lab.yaml").write_text(
        "id: tiny\ntitle: {en: Tiny, zh: 小}\nsummary: s\nduration_min: 5\nsteps:\n"
        "  - {id: one, title: {en: One, zh: 一}, file: steps/01-one.md, check: checks/01_one.py}\n"
        "  - {id: two, title: Two, file: steps/02-two.md, check: checks/02_two.py}\n"
    )
    (lab / "steps" / "01-one.md").write_text(
        "# One\n\nSee [the next step](02-two.md#top) and ![diagram](img/d.png), "
        "[notes](notes.txt), [docs](https://example.org/x).\n\n```bash run\necho hi\n```\n"
    )
    (lab / "steps" / "01-one.zh.md").write_text("# 一\n\n见[下一步](02-two.md)。\n")
    (lab / "steps" / "02-two.md").write_text("# Two\n")
    (lab / "steps" / "img").mkdir()
    (lab / "steps" / "img" / "d.png").write_bytes(b"\x89PNG")
    (lab / "steps" / "notes.txt").write_text("n")
    for name in ("01_one.py", "02_two.py"):
        (lab / "checks" / name).write_text("")
    site = tmp_path / "site"
    export_site(LabCatalog(labs), site)
    one = (site / "tiny" / "one.html").read_text()
    assert 'href="two.html#top"' in one
    assert 'src="assets/img/d.png"' in one and (site / "tiny/assets/img/d.png").is_file()
    assert 'href="assets/notes.txt"' in one and (site / "tiny/assets/notes.txt").is_file()
    assert 'href="https://example.org/x"' in one
    assert '<code class="language-bash">echo hi' in one and "<button" not in one
    assert 'href="two.zh.html"' in (site / "tiny" / "one.zh.html").read_text()
    assert not list((site / "tiny" / "assets").rglob("*.md"))
    # a step with no Chinese file falls back to English text in the Chinese page
    assert "<h1>Two</h1>" in (site / "tiny" / "two.zh.html").read_text()
    assert re.search(r'href="one.html">← Previous', (site / "tiny" / "two.html").read_text())


def test_command(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "labserver.cli", "export-site", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "LABSERVER_LABS_DIR": str(REPO / "labs"), "HOME": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "index.html").is_file() and (tmp_path / "out" / "index.zh.html").is_file()
    assert "wrote" in res.stdout
