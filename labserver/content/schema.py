"""``lab.yaml`` schema. Unknown fields are errors, so a typo is reported instead of ignored.

Every human text is either a plain string (English) or ``{en: ..., zh: ...}``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LANGS = ("en", "zh")
ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


class I18n(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    en: str = Field(min_length=1)
    zh: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_plain_string(cls, value: Any) -> Any:
        return {"en": value} if isinstance(value, str) else value

    def get(self, lang: str) -> str:
        return (self.zh if lang == "zh" and self.zh else None) or self.en

    def __str__(self) -> str:
        return self.en


class Talk(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: I18n
    speaker: str = ""


class Requires(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device: Literal["any", "npu", "cpu"] = "any"
    cpus: float = Field(default=1.0, gt=0, le=64)
    memory_mb: int = Field(default=2048, ge=128, le=1024 * 1024)
    network: bool = False


class StepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=ID_PATTERN)
    title: I18n
    file: str = Field(min_length=1)
    check: str = Field(min_length=1)
    hints: list[I18n] = Field(default_factory=list)
    timeout_s: float = Field(default=60.0, gt=0, le=1800)
    solve: str | None = None


class LabSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=ID_PATTERN)
    title: I18n
    talk: Talk | None = None
    summary: I18n
    duration_min: int = Field(gt=0, le=24 * 60)
    requires: Requires = Field(default_factory=Requires)
    image: str = "labserver/cpu-emu"
    order: int = 100  # position in the lab list
    steps: list[StepSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_step_ids(self) -> LabSpec:
        seen: set[str] = set()
        for step in self.steps:
            if step.id in seen:
                raise ValueError(f"step id {step.id!r} is used twice")
            seen.add(step.id)
        return self
