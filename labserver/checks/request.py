"""The one builder of a check request: which checker runs, for how long, and the ``LAB_*`` variables
it sees (DESIGN: the checker protocol). The Check button (:mod:`labserver.services.grading.checking`),
``labserver check`` (:mod:`labserver.cli.check`) and ``labserver selftest``
(:mod:`labserver.checks.selftest`) all build their request here, so a checker sees the same
variables wherever it runs.

=================  =====================================================================
variable           value
=================  =====================================================================
``LAB_ID``         the lab id
``LAB_STEP``       the step id
``LAB_STEP_INDEX`` the step's 1-based position in ``lab.yaml``
``LAB_DEVICE``     the device of the environment the check runs in (``EnvRef.device``:
                   ``npu:0`` or ``cpu-emu``), i.e. what the backend placed, never a guess
``LAB_RUN_ID``     a fresh random id per run (:func:`new_run_id`); checkers derive unseen
                   inputs from it and ``labkit.check`` hides it from attendee code, so it
                   is never a constant, not even for the CLI or the self-test
``LAB_LANG``       ``en`` or ``zh``: the language of the verdict's message
=================  =====================================================================

The backend adds ``LAB_RESULT_FD`` (the result channel) and, where it has one, ``LAB_DIR`` /
``LAB_WORKSPACE``.
"""

from __future__ import annotations

import uuid

from labserver.backends.base import CheckMeter, CheckRequest, EnvRef
from labserver.checks.timeouts import wall_budget
from labserver.content import Lab, Step

DEFAULT_LOG_LIMIT = 64 * 1024


def new_run_id() -> str:
    """An unpredictable run id (``LAB_RUN_ID``)."""
    return uuid.uuid4().hex


def lab_env(lab: Lab, step: Step, *, device: str, run_id: str, lang: str = "en") -> dict[str, str]:
    """The ``LAB_*`` variables of one check run (table in the module docstring)."""
    return {
        "LAB_ID": lab.id,
        "LAB_STEP": step.id,
        "LAB_STEP_INDEX": str(step.index + 1),
        "LAB_DEVICE": device,
        "LAB_RUN_ID": run_id,
        "LAB_LANG": lang,
    }


def check_request(
    lab: Lab,
    step: Step,
    ref: EnvRef,
    *,
    lang: str = "en",
    log_limit: int = DEFAULT_LOG_LIMIT,
    run_id: str | None = None,
    timeout_s: float | None = None,
    meter: CheckMeter | None = None,
) -> CheckRequest:
    """The request that runs ``step``'s checker in the environment ``ref``, for ``timeout_s``
    seconds (default: the step's wall budget from its recorded cost,
    :func:`labserver.checks.timeouts.wall_budget`); ``meter`` reads what it uses (base.CheckMeter)."""
    if timeout_s is None:
        timeout_s = wall_budget(step.spec.timeout_s, lab.costs.get(step.id), ref.backend)
    return CheckRequest(
        lab_id=lab.id,
        step_id=step.id,
        checker=step.checker,
        timeout_s=timeout_s,
        log_limit=log_limit,
        env=lab_env(lab, step, device=ref.device, run_id=run_id or new_run_id(), lang=lang),
        meter=meter,
    )
