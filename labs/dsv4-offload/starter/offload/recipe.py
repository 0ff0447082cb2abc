"""The recipe's switches, read like the real launch script reads them.

``recipe/config/dsv4_flash_toy.env`` holds ``KEY=VALUE`` lines (the defaults of the recipe);
environment variables of the same name override them, so
``KT_SIDE_STREAM=1 bash recipe/scripts/launch_ds4flash_npu.sh`` works as in the real recipe.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

ENV_FILE = Path(__file__).resolve().parent.parent / "recipe" / "config" / "dsv4_flash_toy.env"


@dataclass(frozen=True)
class Recipe:
    #: routed experts per layer kept on the device (W8A8); the others run on the CPU in MXFP4
    KT_NUM_GPU_EXPERTS: int = 32
    #: issue the CPU experts on a side stream so they overlap the device's resident experts
    KT_SIDE_STREAM: int = 0
    #: re-choose each layer's resident experts from the counts of every request's prefill
    KT_DYNAMIC_RESIDENT: int = 0
    #: stream all experts through the device for prefills of at least the threshold
    KT_PREFILL_STREAM: int = 0
    KT_PREFILL_STREAM_THRESHOLD: int = 512
    #: experts per H2D chunk when streaming (the staging buffer must fit next to the KV cache)
    KT_PREFILL_STREAM_CHUNK: int = 16
    #: tokens of context the KV cache is reserved for (prompt + generated)
    CONTEXT_LENGTH: int = 768
    #: emulated hardware profile (the talk's environment 1: an Atlas A3 die)
    PROFILE: str = "A3"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def read_env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("export "):
            line = line[len("export ") :]
        if "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def load(overrides: dict[str, object] | None = None, env_file: Path | None = None) -> Recipe:
    """Defaults <- the env file <- the process environment <- ``overrides``."""
    values: dict[str, object] = {}
    names = {f.name: f.type for f in fields(Recipe)}
    values.update({k: v for k, v in read_env_file(env_file or ENV_FILE).items() if k in names})
    values.update({k: v for k, v in os.environ.items() if k in names})
    values.update({k: v for k, v in (overrides or {}).items() if k in names})
    typed = {k: (str(v) if names[k] in ("str", str) else int(v)) for k, v in values.items()}  # type: ignore[call-overload]
    return Recipe(**typed)
