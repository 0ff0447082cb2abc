"""What the attendee is told when their workspace is full (issue 13 item 10): the editor's save
(507, app.py) and a check whose log shows ENOSPC say "Your workspace is full (N MB): delete files",
in the attendee's language. N is the workspace's limit when it has one (Docker with
``LABSERVER_DOCKER__WORKSPACE_MB``), else left out."""

from __future__ import annotations

from labserver.i18n import gettext

#: how the C library words ENOSPC, in a check's log or a shell's output
NO_SPACE = b"No space left on device"


def message(lang: str, size_mb: int = 0) -> str:
    if size_mb:
        return gettext(lang, "Your workspace is full ({mb} MB): delete files, then save again.").format(
            mb=size_mb
        )
    return gettext(lang, "Your workspace is full: delete files, then save again.")
