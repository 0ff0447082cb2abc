"""Markdown for step instructions. One extra marker exists: a fenced block whose info string is
``<lang> run`` (e.g. ```` ```bash run ````) gets a "Run in terminal" button. Any other extra word
is reported by lint (:func:`fence_problems`) and rendered as a plain block."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

RUN_MARKER = "run"
RUNNABLE_LANGS = {"bash", "sh", "shell", "console", ""}

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")


def _parse_info(info: str) -> tuple[str, list[str]]:
    words = info.split()
    return (words[0] if words else ""), words[1:]


def _render_fence(_renderer, tokens: list[Token], idx: int, options, env) -> str:  # type: ignore[no-untyped-def]
    # add_render_rule binds the rule to the renderer, so it receives the renderer first
    token = tokens[idx]
    lang, extras = _parse_info(token.info)
    code = html.escape(token.content)
    cls = f' class="language-{html.escape(lang)}"' if lang else ""
    if extras == [RUN_MARKER] and lang in RUNNABLE_LANGS:
        run_label = html.escape(env.get("run_label", "Run in terminal"))
        payload = html.escape(token.content.rstrip("\n"), quote=True)
        return (
            f'<div class="code-run"><pre><code{cls}>{code}</code></pre>'
            f'<button type="button" class="run-in-terminal" data-command="{payload}">▶ {run_label}</button></div>\n'
        )
    return f"<pre><code{cls}>{code}</code></pre>\n"


_md.add_render_rule("fence", _render_fence)

_ASSET_SRC = re.compile(r'(<img [^>]*src=")(?!https?:|/|data:)([^"]+)"')


def render(text: str, *, asset_base: str = "", run_label: str = "Run in terminal") -> str:
    """Markdown → HTML (raw HTML in the source is escaped). Relative image paths are rewritten to
    ``asset_base`` (the URL of the lab's ``steps/`` folder)."""
    out = _md.render(text, {"run_label": run_label})
    if asset_base:
        out = _ASSET_SRC.sub(lambda m: f'{m.group(1)}{asset_base.rstrip("/")}/{m.group(2)}"', out)
    return out


def fence_problems(text: str) -> list[tuple[int, str]]:
    """(line, message) for every fenced block with an unknown marker."""
    problems = []
    for token in _md.parse(text):
        if token.type != "fence":
            continue
        lang, extras = _parse_info(token.info)
        line = (token.map[0] + 1) if token.map else 0
        if not extras:
            continue
        if extras != [RUN_MARKER]:
            problems.append(
                (line, f"unknown code-block marker {' '.join(extras)!r}; the only marker is 'run'")
            )
        elif lang not in RUNNABLE_LANGS:
            problems.append((line, f"'run' works on shell blocks (bash, sh), not {lang!r}"))
    return problems
