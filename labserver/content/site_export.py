"""``labserver export-site DIR``: every lab's instructions as static HTML, for reading with no
server and no network (on a plane).

Layout of ``DIR`` (every link is relative, every page loads only ``style.css``; nothing from any host)::

    index.html, index.zh.html                 lab list (English, Chinese)
    style.css                                 the only stylesheet
    <lab>/index.html, <lab>/index.zh.html     lab overview: talk, summary, steps
    <lab>/<step-id>.html, .zh.html            one step: instructions, hints, how to check it
    <lab>/assets/...                          images and other files beside the steps' Markdown

"Run in terminal" buttons become plain code blocks, links between step files (``02-x.md``) point at
the step pages, and other relative links point into ``assets/``.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from labserver import __version__
from labserver.content import Lab, LabCatalog
from labserver.content.markdown import render

LANGS = ("en", "zh")

TEXT = {
    "en": {
        "labs": "Labs",
        "steps": "Steps",
        "step": "Step",
        "home": "All labs",
        "prev": "← Previous",
        "next": "Next →",
        "hints": "Hints",
        "talk": "Talk",
        "minutes": "min",
        "other": "中文",
        "check": "Check this step on your machine with",
        "intro": "The instructions of every lab, for reading offline. Run the labs themselves with "
        "<code>labserver selfpaced</code>.",
    },
    "zh": {
        "labs": "实验",
        "steps": "步骤",
        "step": "步骤",
        "home": "全部实验",
        "prev": "← 上一步",
        "next": "下一步 →",
        "hints": "提示",
        "talk": "报告",
        "minutes": "分钟",
        "other": "English",
        "check": "在你的电脑上检查这一步：",
        "intro": "所有实验的说明，可离线阅读。运行实验请用 <code>labserver selfpaced</code>。",
    },
}

CSS = """\
:root { --fg: #1d2330; --muted: #5b6475; --line: #d9dee8; --accent: #c7000b; --bg: #fff; --code: #f4f6fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.6 system-ui, -apple-system, "Segoe UI", "Noto Sans", "PingFang SC",
       "Microsoft YaHei", sans-serif; color: var(--fg); background: var(--bg); }
header, main, footer { max-width: 52rem; margin: 0 auto; padding: 0 1.25rem; }
header { display: flex; gap: 1rem; align-items: baseline; flex-wrap: wrap; padding-top: 1rem;
         border-bottom: 1px solid var(--line); padding-bottom: .6rem; }
header .lang { margin-left: auto; }
a { color: var(--accent); }
h1 { font-size: 1.7rem; line-height: 1.25; }
h2 { font-size: 1.3rem; margin-top: 2rem; }
pre { background: var(--code); padding: .8rem 1rem; overflow-x: auto; border-radius: 6px; }
code { font: .92em/1.5 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
:not(pre) > code { background: var(--code); padding: .1em .3em; border-radius: 4px; }
table { border-collapse: collapse; } td, th { border: 1px solid var(--line); padding: .3rem .6rem; }
img { max-width: 100%; }
ol.steps li, ul.labs li { margin: .4rem 0; }
.meta { color: var(--muted); font-size: .92rem; }
details { border: 1px solid var(--line); border-radius: 6px; padding: .5rem .9rem; margin: 1.5rem 0; }
nav.pager { display: flex; justify-content: space-between; margin: 2.5rem 0 1rem; }
footer { color: var(--muted); font-size: .85rem; padding: 2rem 1.25rem; }
"""

_RUN_BUTTON = re.compile(r'<button type="button" class="run-in-terminal"[^>]*>.*?</button>', re.S)
_HREF = re.compile(r'(<a [^>]*href=")([^"#:]+?)(#[^"]*)?"')
_SRC = re.compile(r'(<img [^>]*src=")(?!https?:|/|data:)([^"]+)"')


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def page_name(step_id: str, lang: str, prefix: str = "") -> str:
    return f"{prefix}{step_id}{'' if lang == 'en' else '.zh'}.html"


def index_name(lang: str) -> str:
    return "index.html" if lang == "en" else "index.zh.html"


def _page(lang: str, title: str, body: str, *, root: str, other: str, crumbs: str) -> str:
    t = TEXT[lang]
    return f"""<!doctype html>
<html lang="{"zh-CN" if lang == "zh" else "en"}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<link rel="stylesheet" href="{root}style.css">
</head>
<body>
<header><strong><a href="{root}{index_name(lang)}">labserver</a></strong>{crumbs}
<a class="lang" href="{other}">{t["other"]}</a></header>
<main>
{body}
</main>
<footer>labserver {__version__}</footer>
</body>
</html>
"""


def _step_html(lab: Lab, lang: str) -> dict[str, str]:
    """Step Markdown file name (both languages) -> the step page in ``lang``."""
    names = {}
    for step in lab.steps:
        names[step.markdown.name] = page_name(step.id, lang)
        if step.markdown_zh is not None:
            names[step.markdown_zh.name] = page_name(step.id, lang)
    return names


def render_step(lab: Lab, index: int, lang: str) -> str:
    step = lab.steps[index]
    t = TEXT[lang]
    body = render(step.instructions(lang), run_label="")
    body = _RUN_BUTTON.sub("", body)
    pages = _step_html(lab, lang)

    def fix_href(m: re.Match[str]) -> str:
        target, anchor = m.group(2), m.group(3) or ""
        name = target.rsplit("/", 1)[-1]
        if name in pages and "/" not in target.strip("./"):
            return f'{m.group(1)}{pages[name]}{anchor}"'
        if target.startswith(("/", "..")):
            return m.group(0)
        return f'{m.group(1)}assets/{target}{anchor}"'

    body = _HREF.sub(fix_href, body)
    body = _SRC.sub(lambda m: f'{m.group(1)}assets/{m.group(2)}"', body)
    hints = "".join(f"<li>{_e(h.get(lang))}</li>" for h in step.spec.hints)
    if hints:
        body += f"<details><summary>{t['hints']}</summary><ul>{hints}</ul></details>"
    body += f'<p class="meta">{t["check"]} <code>labserver check {lab.id} {step.id}</code></p>'
    prev = (
        f'<a href="{page_name(lab.steps[index - 1].id, lang)}">{t["prev"]}</a>'
        if index > 0
        else f'<a href="{index_name(lang)}">{_e(lab.spec.title.get(lang))}</a>'
    )
    nxt = (
        f'<a href="{page_name(lab.steps[index + 1].id, lang)}">{t["next"]}</a>'
        if index + 1 < len(lab.steps)
        else f'<a href="../{index_name(lang)}">{t["home"]}</a>'
    )
    title = f"{index + 1}. {step.spec.title.get(lang)}"
    head = f'<p class="meta">{_e(lab.spec.title.get(lang))} · {t["step"]} {index + 1}/{len(lab.steps)}</p>'
    crumbs = f' › <a href="{index_name(lang)}">{_e(lab.spec.title.get(lang))}</a>'
    other = page_name(step.id, "zh" if lang == "en" else "en")
    return _page(
        lang,
        f"{title} — {lab.spec.title.get(lang)}",
        f"{head}<article>{body}</article><nav class='pager'>{prev}{nxt}</nav>",
        root="../",
        other=other,
        crumbs=crumbs,
    )


def render_lab(lab: Lab, lang: str) -> str:
    t = TEXT[lang]
    spec = lab.spec
    talk = ""
    if spec.talk is not None:
        talk = f'<p class="meta">{t["talk"]}: {_e(spec.talk.title.get(lang))}'
        talk += f" — {_e(spec.talk.speaker)}</p>" if spec.talk.speaker else "</p>"
    steps = "".join(
        f'<li><a href="{page_name(s.id, lang)}">{_e(s.spec.title.get(lang))}</a></li>' for s in lab.steps
    )
    body = (
        f"<h1>{_e(spec.title.get(lang))}</h1>{talk}"
        f"<p>{_e(spec.summary.get(lang))}</p>"
        f'<p class="meta">{spec.duration_min} {t["minutes"]}</p>'
        f'<h2>{t["steps"]}</h2><ol class="steps">{steps}</ol>'
    )
    return _page(
        lang,
        spec.title.get(lang),
        body,
        root="../",
        other=index_name("zh" if lang == "en" else "en"),
        crumbs=f" › {_e(spec.title.get(lang))}",
    )


def render_index(labs: list[Lab], lang: str) -> str:
    t = TEXT[lang]
    items = "".join(
        f'<li><a href="{lab.id}/{index_name(lang)}">{_e(lab.spec.title.get(lang))}</a>'
        f' <span class="meta">· {len(lab.steps)} {t["steps"].lower() if lang == "en" else t["steps"]}'
        f" · {lab.spec.duration_min} {t['minutes']}</span><br>{_e(lab.spec.summary.get(lang))}</li>"
        for lab in labs
    )
    body = f'<h1>{t["labs"]}</h1><p>{t["intro"]}</p><ul class="labs">{items}</ul>'
    return _page(
        lang,
        f"labserver — {t['labs']}",
        body,
        root="",
        other=index_name("zh" if lang == "en" else "en"),
        crumbs="",
    )


def export_site(catalog: LabCatalog, out: Path) -> list[Path]:
    """Write the site into ``out`` (created; existing files with the same names are replaced).
    Returns the HTML pages written."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "style.css").write_text(CSS, encoding="utf-8")
    labs = list(catalog.labs.values())
    written = []
    for lang in LANGS:
        path = out / index_name(lang)
        path.write_text(render_index(labs, lang), encoding="utf-8")
        written.append(path)
    for lab in labs:
        folder = out / lab.id
        folder.mkdir(exist_ok=True)
        assets = folder / "assets"
        if assets.exists():
            shutil.rmtree(assets)
        shutil.copytree(
            lab.path / "steps",
            assets,
            ignore=lambda _d, names: [n for n in names if n.endswith(".md") or n == "__pycache__"],
        )
        for lang in LANGS:
            path = folder / index_name(lang)
            path.write_text(render_lab(lab, lang), encoding="utf-8")
            written.append(path)
            for index, step in enumerate(lab.steps):
                path = folder / page_name(step.id, lang)
                path.write_text(render_step(lab, index, lang), encoding="utf-8")
                written.append(path)
    return written
