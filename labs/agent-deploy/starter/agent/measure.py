"""How a skill is measured: emulated decode time per token and device memory, steady state."""

from __future__ import annotations

from labkit import emu  # noqa: F401 (you will need it)

PROFILE = "950PR"  # the Ascend 950 of the talk's 103.18 -> 17.98 ms run


def measure(model, prompts, n, profile=PROFILE):
    """Steady-state decode figures over ``prompts``, ``n`` new tokens each:
    ``{"ms_per_token", "launches_per_token", "weight_bytes", "ops"}`` where ``ops`` maps each op
    kind of the emulation report to its ``time_ms``, ``launches``, ``flops`` and ``bytes`` per
    decoded token. Prefill is not charged and gives the first of the ``n`` tokens."""
    # TODO (step 1)
    raise NotImplementedError("TODO (step 1): measure() in agent/measure.py")


def profile(model, prompts, n, profile=PROFILE):
    """``measure()``'s figures plus where a decoded token's time goes: ``launch_ms``,
    ``compute_ms``, ``memory_ms`` (per token, from the cost model's rates), ``bound`` (the
    largest of the three: "launch", "compute" or "memory") and ``top_ops`` (the five op kinds
    that take the most time, ``[(op, ms per token)]``)."""
    # TODO (step 1)
    raise NotImplementedError("TODO (step 1): profile() in agent/measure.py")
