"""Two languages, one mechanism: gettext catalogs (``labserver/locale/<lang>/LC_MESSAGES/*.po``,
Babel format) used by Jinja2's i18n extension in templates and by :func:`gettext` in Python.

Catalogs are compiled in memory at start, so a fresh checkout needs no build step. To add strings:
``make messages`` (pybabel extract + update), translate, restart."""

from __future__ import annotations

import functools
import io
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import NullTranslations, Translations
from starlette.requests import HTTPConnection

LANGS = ("en", "zh")
LANG_NAMES = {"en": "English", "zh": "简体中文"}
LOCALE_DIR = Path(__file__).resolve().parent / "locale"


@functools.cache
def translations(lang: str) -> NullTranslations:
    """All ``*.po`` catalogs of ``lang`` merged (one file per area: messages.po for the attendee
    side, instructor.po for the instructor's room)."""
    folder = LOCALE_DIR / lang / "LC_MESSAGES"
    if lang == "en" or not folder.is_dir():
        return NullTranslations()
    merged: Translations | None = None
    for po in sorted(folder.glob("*.po")):
        with po.open("rb") as f:
            catalog = read_po(f, locale=lang)
        buf = io.BytesIO()
        write_mo(buf, catalog)
        buf.seek(0)
        part = Translations(buf)
        if merged is None:
            merged = part
        else:
            merged.merge(part)
    return merged or NullTranslations()


def gettext(lang: str, message: str) -> str:
    return translations(lang).gettext(message)


def parse_accept_language(header: str) -> str:
    best: tuple[float, str] | None = None
    for part in header.split(","):
        piece = part.strip()
        if not piece:
            continue
        tag, _, params = piece.partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        primary = tag.strip().lower().split("-")[0]
        if primary in LANGS and (best is None or q > best[0]):
            best = (q, primary)
    return best[1] if best else "en"


def pick_lang(conn: HTTPConnection) -> str:
    """The request's language: ``?lang=``, then the language cookie, then Accept-Language."""
    query = conn.query_params.get("lang", "")
    if query in LANGS:
        return query
    cookie = conn.cookies.get("labserver_lang", "")
    if cookie in LANGS:
        return cookie
    return parse_accept_language(conn.headers.get("accept-language", ""))
