"""Shared helpers of the dsv4-offload checkers (trusted side).

The checkers never trust the workspace's copy of the model: :data:`LAB_SRC` is the lab's own
pristine ``starter/`` on the server, from which ``dsv4flash`` (weights, reference forward,
MXFP4 codec, corpus) is imported. Attendee code runs only through ``labkit.check.run_function``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

LAB_SRC = Path(__file__).resolve().parent.parent / "starter"
#: the trusted harness, run in the child (it imports the attendee's ``offload`` package there)
HARNESS = str(Path(__file__).resolve().parent / "dsv4harness.py")
sys.path.insert(0, str(LAB_SRC))
torch.set_num_threads(1)

from dsv4flash import Checkpoint, Reference, Tokenizer, make_prompt, mxfp4, vocabulary  # noqa: E402
from dsv4flash.corpus import TOPICS  # noqa: E402
from labkit.check import Failure, msg, run_function  # noqa: E402


def run_seed(salt: str = "") -> int:
    """A seed derived from this check run (``LAB_RUN_ID``) and the step: prompts, layers and
    parameters the attendee has not seen and a neighbour cannot copy (the workspace scripts use
    seed 1)."""
    key = f"{os.environ.get('LAB_RUN_ID', 'no-run-id')}/{os.environ.get('LAB_STEP', '')}/{salt}"
    return 1000 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 10**6


def run_choice(salt: str, options: list[Any]) -> Any:
    return options[run_seed(salt) % len(options)]


#: prompts the attendee has never seen: a seed of this run
HELDOUT_SEED = run_seed("prompts")
#: logits may differ from the reference by the W8A8 / Q8_0 activation rounding only: the solution
#: stays within 0.007-0.012 x std on every step's prompts (ATen's AVX512 and scalar kernels alike,
#: the reference is computed here, in the same run); one expert computed with its neighbour's
#: weights gives 0.42
LOGIT_TOL = 0.05

_CKPT: Checkpoint | None = None


def ckpt() -> Checkpoint:
    global _CKPT
    if _CKPT is None:
        _CKPT = Checkpoint.load()
    return _CKPT


def requests(
    n_topics: int, n_prompt: int, n_decode: int, seed: int | None = None, first: int | None = None
) -> list[list[int]]:
    """One request per topic; without ``seed`` / ``first``, this run's seed and topics."""
    tok = Tokenizer(vocabulary(ckpt().cfg.vocab_size))
    topics = list(TOPICS)
    start = run_seed(f"topics{n_topics}/{n_prompt}") % len(topics) if first is None else first
    names = [topics[(start + i) % len(topics)] for i in range(n_topics)]
    s = HELDOUT_SEED if seed is None else seed
    return [tok.encode(make_prompt(t, n_prompt + n_decode, s)) for t in names]


def reference_logits(
    reqs: list[list[int]], prefill_len: int
) -> tuple[list[torch.Tensor], list[list[tuple[int, torch.Tensor]]]]:
    """Logits rows (last prefill position, then every decode step) and the prefill routing."""
    with torch.inference_mode():  # no autograd bookkeeping: the same values, less CPU
        return _reference_logits(reqs, prefill_len)


def _reference_logits(
    reqs: list[list[int]], prefill_len: int
) -> tuple[list[torch.Tensor], list[list[tuple[int, torch.Tensor]]]]:
    ref = Reference(ckpt())
    out, traces = [], []
    for ids in reqs:
        ref.trace = []
        rows = [ref.prefill(ids[:prefill_len])[-1]]
        traces.append(ref.trace)
        ref.trace = None
        rows += [ref.decode(t) for t in ids[prefill_len:]]
        out.append(torch.stack(rows))
    return out, traces


def harness(func: str, *args: Any, call: str, hint: str, timeout: float = 60, **kw: Any) -> Any:
    """``dsv4harness.func(*args)`` in a child; an error is reported as raised by ``call`` (the
    attendee's code the harness ran, e.g. ``offload/plan.py: plan_memory()``)."""
    res = run_function(HARNESS, func, *args, timeout=timeout, **kw)
    return dataclasses.replace(res, call=call).unwrap(hint)


def serve(
    reqs: list[list[int]],
    prefill_len: int | list[int],
    overrides: dict[str, Any],
    hint: str,
    timeout: float = 120,
    logits: bool = True,
    trace: bool = False,
) -> dict[str, Any]:
    """The attendee's engine on ``reqs``, driven by the trusted harness in a child process."""
    value: dict[str, Any] = harness(
        "serve",
        reqs,
        prefill_len,
        overrides,
        logits,
        trace,
        call="offload/engine.py: OffloadEngine",
        hint=hint,
        timeout=timeout,
        memory_mb=3072,
    )
    return _judge_served(value, overrides, hint)


@dataclasses.dataclass
class Served:
    """One :func:`serve` run of :func:`serve_all`: :meth:`result` judges it as ``serve()`` does,
    at the point where the checker calls it."""

    case: dict[str, Any]
    hint: str
    value: dict[str, Any] | None  # None: the batch raised, so this case runs on its own

    def result(self) -> dict[str, Any]:
        if self.value is None:
            return serve(**self.case, hint=self.hint)
        return _judge_served(self.value, self.case["overrides"], self.hint)


def serve_all(cases: list[dict[str, Any]], hint: str, timeout: float = 120) -> list[Served]:
    """Several :func:`serve` runs (each ``{reqs, prefill_len, overrides[, logits, trace]}``) in
    one child process: one interpreter, one ``import torch``, one checkpoint load for all, each
    case on a fresh engine and emulated session (cases with the same overrides start from one
    build and load of the engine, each in a fork of it: ``dsv4harness.serve_runs``). When the
    attendee's code raises in any case, every case runs again in its own child when its result
    is asked for, so the checker reports the same failure, in the same order, as with one
    ``serve()`` per case."""
    full = [{"logits": True, "trace": False, **c} for c in cases]
    res = run_function(
        HARNESS,
        "serve_each",
        [[c["reqs"], c["prefill_len"], c["overrides"], c["logits"], c["trace"]] for c in full],
        timeout=timeout * len(full),
        memory_mb=3072,
    )
    values = res.value if res.error is None and isinstance(res.value, list) else [None] * len(full)
    if len(values) != len(full):
        values = [None] * len(full)
    return [Served(c, hint, v) for c, v in zip(full, values, strict=True)]


def _judge_served(value: Any, overrides: dict[str, Any], hint: str) -> dict[str, Any]:
    if not isinstance(value, dict) or "requests" not in value:
        raise Failure(
            msg(
                "The engine returned something unexpected; restore offload/ from the starter.",
                "引擎返回了意外的内容；请从初始文件恢复 offload/。",
            )
        )
    if value["oom"] is not None:
        where = value["oom"]["where"]
        raise Failure(
            msg(
                f"The emulated card ran out of memory (budget exceeded) in {where} with {overrides}:\n{value['oom']['message']}",
                f"在 {overrides} 下，仿真卡在{where.replace('request', '请求').replace('load', '加载')}时内存不足（超出预算）：\n"
                f"{value['oom']['message']}",
            ),
            [hint],
        )
    if value["peak_bytes"] > value["capacity_bytes"]:
        raise Failure(
            msg(
                f"Device memory peaked at {value['peak_bytes']} B, over the {value['capacity_bytes']} B budget.",
                f"设备内存峰值 {value['peak_bytes']} B，超过了 {value['capacity_bytes']} B 的预算。",
            ),
            [hint],
        )
    return value


#: main-stream ops that may run while the CPU stream works: the shared and resident experts (the
#: card's own share of the layer, which the CPU result is not an input of)
OVERLAPPABLE = ("shared_expert", "routed_expert")


def first_race(spans: list[tuple[str, str, float, float]]) -> tuple[str, float, int] | None:
    """The first main-stream op, other than the shared and resident experts, that starts before
    side-stream work issued earlier has finished: (op, ms too early, its index among such ops)
    or None. That op would read the CPU result (or come after it) before it exists."""
    side_end, count = 0.0, 0
    for op, stream, start, end in spans:
        if stream != "main":
            side_end = max(side_end, end)
        elif not op.startswith(OVERLAPPABLE):
            if start < side_end - 1e-9 * max(1.0, side_end):
                return op, side_end - start, count
            count += 1
    return None


def compare_logits(got: dict[str, Any], ref: list[torch.Tensor], what: str, hint: str) -> float:
    """Worst ``max |logit - ref| / std(ref)`` over the requests; Failure above :data:`LOGIT_TOL`."""
    worst = 0.0
    for i, (req, r) in enumerate(zip(got["requests"], ref, strict=True)):
        e = req["logits"]
        if not isinstance(e, torch.Tensor) or tuple(e.shape) != tuple(r.shape):
            raise Failure(
                msg(
                    f"{what}: request {i} gave logits of shape {getattr(e, 'shape', None)}, expected {tuple(r.shape)}.",
                    f"{what}：请求 {i} 的 logits 形状为 {getattr(e, 'shape', None)}，应为 {tuple(r.shape)}。",
                ),
                [hint],
            )
        err = float((e.float() - r).abs().max() / r.std())
        if math.isnan(err) or err > LOGIT_TOL:
            step = (
                int(((e.float() - r).abs().amax(-1) / r.std() > LOGIT_TOL).nonzero()[0])
                if not math.isnan(err)
                else 0
            )
            where = msg(
                "the prefill" if step == 0 else f"decode step {step}",
                "预填充" if step == 0 else f"第 {step} 个解码步",
            )
            raise Failure(
                msg(
                    f"{what}: the output differs from the reference (the same model without offload) "
                    f"from {where} of request {i} on: max |Δlogit| = {err:.3f} x std, allowed {LOGIT_TOL}. "
                    "Some experts were computed with the wrong weights or the wrong routing weights.",
                    f"{what}：从请求 {i} 的{where}起，输出与参考结果（同一模型、不做 offload）不一致："
                    f"max |Δlogit| = {err:.3f} 倍标准差，允许 {LOGIT_TOL}。有专家用错了权重或路由权重。",
                ),
                [hint],
            )
        worst = max(worst, err)
    return worst


def coverage(counts: torch.Tensor, hot: list[int]) -> float:
    total = float(counts.sum())
    return float(counts[torch.as_tensor(sorted(set(hot)), dtype=torch.long)].sum()) / total if total else 0.0


def counts_of(trace: list[tuple[int, torch.Tensor]], n_layers: int, n_experts: int) -> torch.Tensor:
    c = torch.zeros(n_layers, n_experts, dtype=torch.long)
    for layer, ids in trace:
        c[layer] += torch.bincount(ids.flatten(), minlength=n_experts)
    return c


def read_json(name: str, hint: str) -> dict[str, Any]:
    path = Path(name)
    if not path.is_file():
        raise Failure(msg(f"There is no {name} in the lab folder yet.", f"实验目录里还没有 {name}。"), [hint])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise Failure(
            msg(f"{name} is not valid JSON: {exc}", f"{name} 不是合法的 JSON：{exc}"), [hint]
        ) from exc
    if not isinstance(data, dict):
        raise Failure(msg(f"{name} must hold a JSON object.", f"{name} 必须是一个 JSON 对象。"), [hint])
    return data


def expert_bytes() -> tuple[int, int]:
    """(W8A8 bytes, MXFP4 bytes) of one routed expert, computed here from the shapes."""
    c = ckpt().cfg
    w8 = (2 * c.moe_inter * c.d_model + 2 * c.moe_inter * 4) + (c.d_model * c.moe_inter + c.d_model * 4)
    mx = (3 * c.moe_inter * c.d_model) * 17 // 32
    return w8, mx


def gguf_reference(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    codes = mxfp4.unpack_consecutive(blocks).reshape(*blocks.shape[:-1], -1, 32)
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return torch.cat((scales.unsqueeze(-1), qs), dim=-1).to(torch.uint8)


def cpu_experts_sum(
    layer: int, m: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, cold: torch.Tensor
) -> torch.Tensor:
    """``[n, D]``: each token's cold experts (MXFP4 x Q8_0, as the CPU kernel computes them)
    weighted by its routing weights; zero for a token with no cold expert."""
    out = torch.zeros_like(m)
    for proj_e in torch.unique(ids[cold]).tolist():
        r, col = ((ids == proj_e) & cold).nonzero(as_tuple=True)
        ws = []
        for proj in ("gate_up", "down"):
            blocks, scales = ckpt().expert_codes(layer, proj)
            ws.append(mxfp4.dequantize(mxfp4.unpack_consecutive(blocks[proj_e]), scales[proj_e]))
        x = m[r]
        h = mxfp4.round_trip_q8_0(x) @ ws[0].T
        gate, up = h.chunk(2, dim=-1)
        a = torch.nn.functional.silu(gate) * up
        y = mxfp4.round_trip_q8_0(a) @ ws[1].T
        out = out.index_add(0, r, y * w[r, col, None])
    return out
