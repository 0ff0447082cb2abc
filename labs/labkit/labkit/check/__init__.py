"""labkit.check: the checker side of the checker protocol (DESIGN.md).

A checker::

    from labkit.check import main, run_function, expect_close, msg

    def check():
        ref = ...
        out = run_function("attention.py", "attention", q, k, v).unwrap()
        err = expect_close("attention_out", out, ref, atol=1e-3, hint=msg("did you ...?", "..."))
        return msg("Attention matches.", "注意力结果正确。"), {"max_abs_error": err}

    main(check)
"""

import os as _os

from . import _child
from .assertions import expect, expect_close, expect_equal, expect_file
from .runner import (
    AttendeeError,
    CallResult,
    Frame,
    ScriptResult,
    child_env,
    describe_error,
    run_function,
    run_script,
)
from .verdict import Failure, cpu_seconds, failed, main, msg, passed, result, table

__all__ = [
    "AttendeeError",
    "CallResult",
    "Failure",
    "Frame",
    "ScriptResult",
    "child_env",
    "cpu_seconds",
    "describe_error",
    "expect",
    "expect_close",
    "expect_equal",
    "expect_file",
    "failed",
    "main",
    "msg",
    "passed",
    "result",
    "run_function",
    "run_script",
    "table",
]

if _os.environ.get("LAB_RESULT_FD"):
    # Nothing else on the machine may open /proc/<this checker>/fd/<LAB_RESULT_FD>.
    _child.set_non_dumpable()
