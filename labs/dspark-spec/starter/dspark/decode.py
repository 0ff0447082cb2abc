"""Step 5: the DSpark decode loop: draft a block, keep its confident prefix, verify in one pass.

Inside an emulation session (``labkit.emu.current()``), run the drafter on a side stream
(``with s.stream("draft"):``) and make the main stream wait for it (``s.wait_stream("draft")``)
before the target verifies: the emulated timeline then shows the drafter and the target apart.
"""

from __future__ import annotations

import torch

from .draft import draft_block  # noqa: F401  (use it: the checker watches what it drafts)
from .verify import verify_greedy  # noqa: F401


@torch.no_grad()
def dspark_decode(target, drafter, prompt_ids: list[int], n: int, tau: float) -> tuple[list[int], dict]:
    """Exactly ``n`` tokens, identical to the target's greedy decode, and
    ``{"accepted": [...], "drafted": [...]}``: per iteration, how many drafted tokens passed and how many were drafted."""
    # TODO(step 5)
    raise NotImplementedError("dspark_decode")
