"""Step 1: the one-click script set up a patched TinySana tree and wrote out.mp4 for the prompt."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import sanacheck as sc  # noqa: E402
from labkit.check import Failure, expect, main, msg, run_script  # noqa: E402

TREE = Path("TinySana")
SECOND_PROMPT = "a blue square moving up"


def check_patch() -> None:
    pipeline = TREE / "tinysana" / "pipeline.py"
    expect(
        pipeline.is_file(),
        msg(
            "There is no TinySana/ source tree yet: run `bash infer_platform.sh` (it copies "
            "upstream/TinySana-0.1.1 to TinySana/ and patches it).",
            "还没有 TinySana/ 源码目录：运行 `bash infer_platform.sh`（它把 upstream/TinySana-0.1.1 "
            "复制到 TinySana/ 并打补丁）。",
        ),
    )
    src = pipeline.read_text(encoding="utf-8")
    rejects = [str(p) for p in TREE.rglob("*.rej")]
    rej_hint = msg(
        f" Rejected hunks are in {', '.join(rejects)}.", f" 被拒绝的补丁块在 {', '.join(rejects)}。"
    )
    if "triton_rms_norm import" in src:
        raise Failure(
            msg(
                "npu.patch is not applied: TinySana/tinysana/pipeline.py still imports the Triton "
                "RMSNorm kernel (CUDA only).",
                "npu.patch 没有打上：TinySana/tinysana/pipeline.py 仍然导入 Triton RMSNorm 内核（仅 CUDA）。",
            )
            + (rej_hint if rejects else ""),
            [
                msg(
                    "Run `cd TinySana && git apply --check ../npu.patch` to see what fails.",
                    "运行 `cd TinySana && git apply --check ../npu.patch` 查看失败原因。",
                )
            ],
        )
    init = src.split("class TinySanaPipeline")[-1]
    if 'torch.device("cuda")' in init or "use_triton_rms_norm(" in init or "get_device" not in init:
        raise Failure(
            msg(
                "npu.patch is only half applied: pipeline.py no longer imports Triton, but "
                "TinySanaPipeline still hard-codes CUDA. That is the hunk that conflicts with 0.1.1.",
                "npu.patch 只打上了一半：pipeline.py 不再导入 Triton，但 TinySanaPipeline 仍写死了 CUDA。"
                "这正是与 0.1.1 冲突的那个补丁块。",
            )
            + (rej_hint if rejects else ""),
            [
                msg(
                    "Compare the hunk's '-' lines with TinySana 0.1.1's pipeline.py: one line changed "
                    "upstream. Fix npu.patch, not only the tree, so the script stays one click.",
                    "把补丁块中以 '-' 开头的行与 0.1.1 的 pipeline.py 对比：上游改了一行。请修正 npu.patch 本身，"
                    "让脚本保持一键执行。",
                )
            ],
        )


def check_weights() -> None:
    ckpt = TREE / "checkpoints" / "tinysana.safetensors"
    expect(
        ckpt.is_file(),
        msg(
            "TinySana/checkpoints/tinysana.safetensors is missing: place the bundled weights there.",
            "缺少 TinySana/checkpoints/tinysana.safetensors：请把自带的权重放到那里。",
        ),
    )
    expect(
        sc.sha256(ckpt) == sc.sha256(sc.WEIGHTS),
        msg(
            "TinySana/checkpoints/tinysana.safetensors is not the bundled checkpoint (sha256 differs).",
            "TinySana/checkpoints/tinysana.safetensors 不是自带的权重（sha256 不一致）。",
        ),
        [
            msg(
                "Copy weights/tinysana.safetensors and check it with sha256sum --check.",
                "复制 weights/tinysana.safetensors，并用 sha256sum --check 校验。",
            )
        ],
    )


def check_video(path: Path, prompt: str, what: str) -> dict:
    try:
        frames, meta = sc.probe_mp4(path)
    except Exception as exc:  # noqa: BLE001 - any decoder error means "not a valid MP4"
        raise Failure(
            msg(f"{what} is not a readable MP4: {exc}", f"{what} 不是可读取的 MP4：{exc}")
        ) from None
    problems = []
    if meta.get("codec") != "h264":
        problems.append(f"codec {meta.get('codec')!r} (want 'h264')")
    if len(frames) != sc.FRAMES:
        problems.append(f"{len(frames)} frames (want {sc.FRAMES})")
    if tuple(meta.get("size", ())) != (sc.SIZE, sc.SIZE):
        problems.append(f"size {meta.get('size')} (want {sc.SIZE}x{sc.SIZE})")
    if abs(float(meta.get("fps", 0)) - sc.FPS) > 0.01:
        problems.append(f"{meta.get('fps')} fps (want {sc.FPS})")
    expect(
        not problems,
        msg(f"{what} is not what the pipeline writes: ", f"{what} 与流水线的输出不符：")
        + "; ".join(problems),
    )
    analysis = sc.analyse(frames)
    wrong = sc.mismatch(analysis, prompt)
    expect(
        wrong is None,
        msg(f"{what} does not show {prompt!r}: {wrong}.", f"{what} 没有呈现 {prompt!r}：{wrong}。"),
        [
            msg(
                "Run the script again with its default prompt (or the one named here).",
                "用默认提示词（或这里给出的提示词）重新运行脚本。",
            )
        ],
    )
    return analysis


def check() -> tuple[str, dict]:
    check_patch()
    check_weights()
    out = Path("out.mp4")
    expect(
        out.is_file(),
        msg(
            "out.mp4 is missing: run `bash infer_platform.sh`.",
            "缺少 out.mp4：运行 `bash infer_platform.sh`。",
        ),
    )
    first = check_video(out, sc.PROMPT, "out.mp4")
    with tempfile.TemporaryDirectory(prefix="sanavideo-check-") as tmp:
        second = Path(tmp) / "check.mp4"
        res = run_script(
            ["python", "TinySana/scripts/inference.py", "--prompt", SECOND_PROMPT, "--out", str(second)],
            timeout=45,
            memory_mb=3072,
        )
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-6:])
        expect(
            res.ok and second.is_file(),
            msg(
                f"The patched tree does not run: `python TinySana/scripts/inference.py --prompt "
                f"{SECOND_PROMPT!r}` failed:\n{tail}",
                f"打过补丁的源码无法运行：`python TinySana/scripts/inference.py --prompt {SECOND_PROMPT!r}` 失败：\n{tail}",
            ),
        )
        check_video(second, SECOND_PROMPT, f"the video for {SECOND_PROMPT!r}")
    return (
        msg(
            f"Deployed: out.mp4 shows {sc.describe(first)}; the patched tree also draws {SECOND_PROMPT!r}.",
            f"部署完成：out.mp4 呈现 {sc.describe(first)}；打过补丁的源码也能生成 {SECOND_PROMPT!r}。",
        ),
        {"frames": sc.FRAMES, "dx_px": first["dx"], "dy_px": first["dy"]},
    )


main(check)
