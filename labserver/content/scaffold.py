"""``labserver new LAB``: a new lab folder that works as written.

The lab has one step (write ``swiglu``, the gated activation ``torch_npu.npu_swiglu`` fuses), in
English and Simplified Chinese, its check, starter and solution, and three mutants (typical wrong
solutions), so ``labserver lint`` finds nothing and ``labserver selftest`` passes before the author
changes a line: every later edit starts from a lab that is known to work. The check is written in
the compact form ``labkit.check`` allows (docs/writing-labs.md, "How a step check should read"):
inputs drawn from ``LAB_RUN_ID``, the reference and the usual mistakes side by side as a table,
messages in both languages. The files are the texts below, so a change here is a change every
new lab starts from (tests/content/test_scaffold.py lints and self-tests one)."""

from __future__ import annotations

import re
from pathlib import Path

from labserver.content.schema import ID_PATTERN


class ScaffoldRefused(ValueError):
    """The lab cannot be made there (bad id, folder not empty); the message says what to do."""


LAB_YAML = """\
# Made by `labserver new`: one step that lints, runs and self-tests as it is.
# Change it step by step (docs/writing-labs.md, "Your first lab in 15 minutes").
id: {lab_id}
order: 100
title: {{en: "SwiGLU, the fused activation", zh: "SwiGLU：融合激活函数"}}
talk:
  title: {{en: "Your talk's title", zh: "你的报告题目"}}
  speaker: "Your name (your team)"
summary:
  en: "Write the gated activation torch_npu.npu_swiglu computes in one kernel, on the inputs a model gives it."
  zh: "写出 torch_npu.npu_swiglu 在一个算子里完成的门控激活，并在模型会给它的输入上验证。"
duration_min: 10
requires: {{device: any, cpus: 1, memory_mb: 1024, network: false}}
image: labserver/cpu-emu
steps:
  - id: swiglu
    title: {{en: "Implement SwiGLU", zh: "实现 SwiGLU"}}
    file: steps/01-swiglu.md
    check: checks/01_swiglu.py
    timeout_s: 60
    hints:
      - {{en: "Split x with x.chunk(2, dim): the first half is the gate.", zh: "用 x.chunk(2, dim) 把 x 分成两半：前一半是门。"}}
      - {{en: "SiLU is a * sigmoid(a) (torch.nn.functional.silu); compute in float32 and cast back once.", zh: "SiLU 是 a * sigmoid(a)（torch.nn.functional.silu）；用 float32 计算，最后转回一次。"}}
"""

STEP_EN = """\
# Implement SwiGLU

The MLP of most models in this workshop gates one half of its activations with the other:

```text
a, b = x.chunk(2, dim)        # two halves along `dim`
y    = silu(a) * b            # silu(a) = a * sigmoid(a)
```

On an Ascend NPU `torch_npu.npu_swiglu(x, dim=-1)` does this in one kernel. Write the plain version
in `swiglu.py`, with the same contract:

- `dim` is whatever the caller passes (the last dimension by default);
- the first half is the gate;
- for bf16 or fp16 input, compute in float32 and return `y` in `x`'s dtype.

Try it on an input of your own:

```bash run
python -c "import torch, swiglu; print(swiglu.swiglu(torch.arange(4.0)))"
```

Then press **Check**: your function runs on inputs drawn for this check.
"""

STEP_ZH = """\
# 实现 SwiGLU

本工作坊里大多数模型的 MLP 都用一半激活值去"门控"另一半：

```text
a, b = x.chunk(2, dim)        # 沿 `dim` 分成两半
y    = silu(a) * b            # silu(a) = a * sigmoid(a)
```

在昇腾 NPU 上，`torch_npu.npu_swiglu(x, dim=-1)` 用一个算子完成这一步。请在 `swiglu.py` 中写出
朴素版本，约定相同：

- `dim` 由调用者传入（默认是最后一维）；
- 前一半是门；
- 输入为 bf16 或 fp16 时，用 float32 计算，返回与 `x` 相同数据类型的 `y`。

先用自己的输入试一试：

```bash run
python -c "import torch, swiglu; print(swiglu.swiglu(torch.arange(4.0)))"
```

然后点击**检查**：你的函数会在为这次检查生成的输入上运行。
"""

CHECK = '''\
"""Step 1: swiglu(x, dim) equals torch_npu.npu_swiglu on inputs drawn for this check.

The reference and the usual mistakes sit side by side (MISTAKES): when the answer is wrong and
equals a known wrong formula, the message names that mistake."""

import hashlib
import os

import torch
import torch.nn.functional as F
from labkit.check import Failure, expect_close, main, msg, run_function


def swiglu(x, dim=-1, gate=F.silu, first_half=True):
    """The reference (default arguments) and, with others, the usual mistakes."""
    a, b = x.float().chunk(2, dim)
    a, b = (a, b) if first_half else (b, a)
    return (gate(a) * b).to(x.dtype)


MISTAKES = [  # (a wrong formula, what to tell the attendee)
    (
        lambda x, dim: swiglu(x, dim, first_half=False),
        msg(
            "silu gates the second half: the first half is the gate, silu(a) * b",
            "silu 作用在了后一半上：前一半才是门，silu(a) * b",
        ),
    ),
    (
        lambda x, dim: swiglu(x, dim, gate=torch.sigmoid),
        msg(
            "you compute sigmoid(a) * b: SiLU is a * sigmoid(a)",
            "你算的是 sigmoid(a) * b：SiLU 是 a * sigmoid(a)",
        ),
    ),
    (
        lambda x, dim: swiglu(x, -1),
        msg(
            "x is split on the last dimension whatever dim is passed: split on dim",
            "无论传入什么 dim，x 都在最后一维上切分：应沿 dim 切分",
        ),
    ),
]


def cases():
    """Inputs drawn from this check's run id, plus a dim that is not the last and a bf16 input."""
    run_id = os.environ.get("LAB_RUN_ID") or os.urandom(8).hex()
    g = torch.Generator().manual_seed(int(hashlib.sha256(run_id.encode()).hexdigest()[:8], 16))
    d = 2 * int(torch.randint(4, 33, (1,), generator=g))
    return [
        (torch.randn(3, d, generator=g), -1),
        (torch.randn(2, 5, d, generator=g) * 3, -1),
        (torch.randn(6, 4, d, generator=g), 0),
        (torch.randn(16, d, generator=g).to(torch.bfloat16), -1),
    ]


def check():
    for x, dim in cases():
        where = msg(
            f"For x of shape {tuple(x.shape)} {x.dtype}, dim={dim}: ",
            f"对于形状为 {tuple(x.shape)} 的 {x.dtype} 输入 x，dim={dim}：",
        )
        got = run_function("swiglu.py", "swiglu", x, dim=dim).unwrap(
            msg(
                "Open swiglu.py and replace the `raise NotImplementedError` with your code.",
                "打开 swiglu.py，把 `raise NotImplementedError` 换成你的实现。",
            )
        )
        want = swiglu(x, dim)
        for wrong, why in MISTAKES:
            mistake = wrong(x, dim)
            if (
                isinstance(got, torch.Tensor)
                and got.shape == mistake.shape
                and not (mistake.shape == want.shape and torch.allclose(mistake.float(), want.float()))
                and torch.allclose(got.float(), mistake.float(), rtol=1e-2, atol=1e-3)
            ):
                raise Failure(where + why)
        if x.dtype != torch.float32 and isinstance(got, torch.Tensor) and got.shape == want.shape:
            off = (got.float() != want.float()).float().mean().item()  # float32 math rounds the same
            if off > 0.02:
                raise Failure(
                    where
                    + msg(
                        f"{off:.0%} of the elements differ from float32 math rounded once: compute in float32 "
                        "(x.float()) and cast y back to x's dtype at the end",
                        f"{off:.0%} 的元素与 float32 计算后舍入一次的结果不同：请用 float32 计算（x.float()），"
                        "最后再把 y 转回 x 的数据类型",
                    )
                )
        exact = x.dtype == torch.float32  # bf16: one rounding step apart at most
        expect_close(
            "swiglu(x)",
            got,
            want,
            atol=1e-6 if exact else 1e-2,
            rtol=1e-5 if exact else 2**-7,
            hint=where
            + msg(
                "y = silu(a) * b with a, b = x.chunk(2, dim)", "y = silu(a) * b，其中 a, b = x.chunk(2, dim)"
            ),
        )
    return msg(
        "swiglu matches npu_swiglu on 4 inputs you had not seen (2-D, 3-D, dim=0, bf16).",
        "swiglu 在 4 组你没见过的输入上与 npu_swiglu 一致（二维、三维、dim=0、bf16）。",
    )


main(check)
'''

STARTER = '''\
"""Step 1: the gated activation torch_npu.npu_swiglu computes in one kernel."""

import torch


def swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Split x in two halves a, b along dim and return silu(a) * b, in x's dtype."""
    # TODO: your SwiGLU (see the step text for the inputs it will be checked on).
    raise NotImplementedError("swiglu is not written yet")
'''

SOLUTION = '''\
"""Step 1: the gated activation torch_npu.npu_swiglu computes in one kernel."""

import torch
import torch.nn.functional as F


def swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Split x in two halves a, b along dim and return silu(a) * b, in x's dtype."""
    a, b = x.float().chunk(2, dim)
    return (F.silu(a) * b).to(x.dtype)
'''


def _mutant(body: str) -> str:
    return SOLUTION.replace(
        "    a, b = x.float().chunk(2, dim)\n    return (F.silu(a) * b).to(x.dtype)\n", body
    )


MUTANTS = {
    "second-half": (
        'what: {en: "the second half is taken as the gate: silu(b) * a", zh: "把后一半当成了门：silu(b) * a"}\n'
        "class: logic\n"
        'expect: {en: "second half", zh: "后一半"}\n',
        _mutant("    a, b = x.float().chunk(2, dim)\n    return (F.silu(b) * a).to(x.dtype)\n"),
    ),
    "sigmoid-gate": (
        'what: {en: "sigmoid used as the gate instead of SiLU", zh: "用 sigmoid 代替了 SiLU 作门"}\n'
        "class: logic\n"
        'expect: {en: "sigmoid(a) * b", zh: "sigmoid(a) * b"}\n',
        _mutant(
            "    a, b = x.float().chunk(2, dim)\n    return (torch.sigmoid(a) * b).to(x.dtype)\n"
        ).replace("import torch.nn.functional as F\n", ""),
    ),
    "last-dim-only": (
        'what: {en: "dim ignored: always split on the last dimension", zh: "忽略了 dim：总在最后一维切分"}\n'
        "class: parameter\n"
        'expect: {en: "whatever dim", zh: "无论传入什么 dim"}\n',
        _mutant("    a, b = x.float().chunk(2, -1)\n    return (F.silu(a) * b).to(x.dtype)\n"),
    ),
}


def lab_files(lab_id: str) -> dict[str, str]:
    """Path (relative to the lab folder) -> text, for a lab called ``lab_id``."""
    files = {
        "lab.yaml": LAB_YAML.format(lab_id=lab_id),
        "steps/01-swiglu.md": STEP_EN,
        "steps/01-swiglu.zh.md": STEP_ZH,
        "checks/01_swiglu.py": CHECK,
        "starter/swiglu.py": STARTER,
        "solution/swiglu.py": SOLUTION,
    }
    for name, (spec, code) in MUTANTS.items():
        files[f"mutants/swiglu/{name}/mutant.yaml"] = spec
        files[f"mutants/swiglu/{name}/swiglu.py"] = code
    return files


def new_lab(folder: Path) -> list[Path]:
    """Write a new lab into ``folder`` (its name is the lab id); the files written. Refuses a bad
    id or a folder that exists and is not empty, with what to do."""
    lab_id = folder.name
    if not re.fullmatch(ID_PATTERN, lab_id):
        raise ScaffoldRefused(
            f"{lab_id!r} cannot be a lab id: use lowercase letters, digits and dashes, starting with "
            "a letter or digit (e.g. kv-offload)"
        )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ScaffoldRefused(f"{folder} exists and is not empty: pick a new name or remove it first")
    written = []
    for rel, text in lab_files(lab_id).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
