"""Step 2: warmup.json was written by running warmup.py here, and warmup.py works.

Two things are judged, neither by trusting the tree: (1) the attendee's warmup.json must hold what
warmup.py computes for its default seed on this device (the checker recomputes the trace, in
float64); (2) a clean copy of the attendee's warmup.py, run by the checker in a temporary folder
on a seed drawn from ``LAB_RUN_ID``, must write the right record for that seed, so a warmup.json
fixed by hand next to a script that does not work does not pass."""

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from labkit.check import Failure, main, msg, run_script
from labkit.device import get_device

DEFAULT_SEED = 7
RERUN = msg(
    "Run `python warmup.py` in this folder and press Check again.",
    "在本目录运行 `python warmup.py`，再点击检查。",
)


def expected_trace(seed: int) -> tuple[float, float]:
    """(trace in float64, tolerance). The tolerance bounds the fp32 matmul's rounding: 64-term
    dot products summed 64 at a time, ~1e-4 in practice; 4-decimal rounding adds 5e-5."""
    torch.manual_seed(seed)
    a = torch.randn(64, 64)
    b = torch.randn(64, 64)
    terms = a.double() * b.double().T  # c_ii = sum_k a_ik b_ki
    return float(terms.sum()), 2e-3 + 1e-7 * float(terms.abs().sum())


def read_record(path: Path) -> dict:
    try:
        got = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError as exc:
        raise Failure(
            msg(
                f"`{path.name}` is not valid JSON ({exc}): was it edited by hand? Run warmup.py again.",
                f"`{path.name}` 不是合法的 JSON（{exc}）：是手动改过吗？请重新运行 warmup.py。",
            ),
            [RERUN],
        ) from exc
    if not isinstance(got, dict):
        raise Failure(
            msg(f"`{path.name}` should hold a JSON object.", f"`{path.name}` 应该是一个 JSON 对象。"), [RERUN]
        )
    return got


def judge(got: dict, seed: int, kind: str, whose: str) -> str:
    """ "" or what is wrong with a record that should be warmup.py's output for ``seed``."""
    if got.get("device") != kind:
        return msg(
            f"{whose} says device {got.get('device')!r}, but this environment runs on {kind!r}: "
            "it was written on another machine or by hand.",
            f"{whose} 写的设备是 {got.get('device')!r}，但这个环境运行在 {kind!r} 上：它是在别的机器上或手动写的。",
        )
    if got.get("seed") != seed:
        return msg(
            f"{whose} was written with seed {got.get('seed')!r}, not {seed}: it is left over from another run "
            "(or another version of warmup.py), not from running it now.",
            f"{whose} 是用种子 {got.get('seed')!r} 而不是 {seed} 写的：它是别的运行（或别的版本的 warmup.py）"
            "留下的，不是现在运行得到的。",
        )
    if got.get("shape") != [64, 64]:
        return msg(
            f"{whose} records shape {got.get('shape')!r}; warmup.py multiplies 64 x 64 matrices.",
            f"{whose} 记录的形状是 {got.get('shape')!r}；warmup.py 乘的是 64 x 64 的矩阵。",
        )
    want, tol = expected_trace(seed)
    trace = got.get("trace")
    if not isinstance(trace, int | float) or isinstance(trace, bool) or abs(trace - want) > tol:
        return msg(
            f"The trace in {whose} is {trace!r}, but the matmul of seed {seed} has trace {want:.4f}: "
            "the numbers were written or edited by hand, not computed.",
            f"{whose} 中的迹是 {trace!r}，但种子 {seed} 的矩阵乘法的迹是 {want:.4f}：这些数字是手写或改过的，不是算出来的。",
        )
    return ""


def run_seed() -> int:
    run_id = os.environ.get("LAB_RUN_ID") or os.urandom(8).hex()
    return (
        100 + int(hashlib.sha256(f"getting-started/warmup/{run_id}".encode()).hexdigest()[:8], 16) % 100_000
    )


def check() -> str:
    kind = get_device().kind
    script = Path("warmup.py")
    if not script.is_file():
        raise Failure(
            msg(
                "`warmup.py` is missing: reset the lab to get it back.",
                "缺少 `warmup.py`：可以重置实验恢复它。",
            )
        )
    path = Path("warmup.json")
    if not path.is_file():
        raise Failure(
            msg(
                "`warmup.json` is missing: run `python warmup.py` first.",
                "缺少 `warmup.json`：请先运行 `python warmup.py`。",
            ),
            [
                msg(
                    "Run it in this folder: warmup.py writes warmup.json where you run it.",
                    "请在本目录运行：warmup.py 会把 warmup.json 写在你运行它的目录里。",
                )
            ],
        )
    problem = judge(read_record(path), DEFAULT_SEED, kind, "`warmup.json`")
    if problem:
        raise Failure(problem, [RERUN])
    # the process, not the state: run a clean copy of the attendee's script on an unseen seed
    seed = run_seed()
    lab = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="warmup-") as tmp:
        shutil.copy2(script, Path(tmp) / "warmup.py")
        os.chdir(tmp)
        try:
            res = run_script([sys.executable, "warmup.py", "--seed", str(seed)], timeout=45)
            out = Path("warmup.json")
            record = read_record(out) if out.is_file() else None
        finally:
            os.chdir(lab)
    if not res.ok or record is None:
        raise Failure(
            msg(
                f"Your warmup.json looks right, but warmup.py itself does not work: run by the checker with "
                f"--seed {seed} it exited {res.exit_code} without writing warmup.json. {res.stderr[-300:]}",
                f"你的 warmup.json 看起来没问题，但 warmup.py 本身不能正常工作：检查器用 --seed {seed} 运行它，"
                f"退出码 {res.exit_code}，没有写出 warmup.json。{res.stderr[-300:]}",
            ),
            [
                msg(
                    "Reset the lab to get the original warmup.py back, then run it.",
                    "可以重置实验恢复原来的 warmup.py，然后运行它。",
                )
            ],
        )
    problem = judge(
        record,
        seed,
        kind,
        msg(
            f"the warmup.json your warmup.py writes for --seed {seed}",
            f"你的 warmup.py 在 --seed {seed} 下写出的 warmup.json",
        ),
    )
    if problem:
        raise Failure(
            msg(
                f"Your warmup.json looks right, but warmup.py does not compute it: {problem}",
                f"你的 warmup.json 看起来没问题，但它不是 warmup.py 算出来的：{problem}",
            ),
            [
                msg(
                    "Reset the lab to get the original warmup.py back, then run it.",
                    "可以重置实验恢复原来的 warmup.py，然后运行它。",
                )
            ],
        )
    return msg(
        f"warmup.py ran on {kind}: trace {expected_trace(DEFAULT_SEED)[0]:.4f} (and {record['trace']} for the checker's seed {seed}).",
        f"warmup.py 在 {kind} 上运行成功：迹为 {expected_trace(DEFAULT_SEED)[0]:.4f}（检查器的种子 {seed} 下为 {record['trace']}）。",
    )


main(check)
