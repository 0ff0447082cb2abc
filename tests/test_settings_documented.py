"""Every setting is documented in docs/settings.md (Datasette-style: undocumented = failing test)."""

from __future__ import annotations

from pydantic import BaseModel

from labserver.config import Settings
from tests.conftest import REPO


def names(model: type[BaseModel], prefix: str = "LABSERVER_") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += names(ann, f"{prefix}{name.upper()}__")
        else:
            out.append(prefix + name.upper())
    return out


def test_every_setting_is_documented() -> None:
    doc = (REPO / "docs" / "settings.md").read_text()
    missing = [n for n in names(Settings) if f"`{n}`" not in doc]
    assert missing == [], f"document these in docs/settings.md: {missing}"
