"""Step 1: the one-click script deploys TinySana *from a clean copy of the starter*.

The check judges the process, not the tree the attendee left: it copies the lab's own starter
(upstream sources, weights) into a temporary folder, adds the attendee's ``infer_platform.sh`` and
``npu.patch``, and runs the script there on a prompt chosen for this run. A tree fixed by hand while
the script still fails, a script that ignores its arguments, or one that does not verify the
checkpoint all fail here. Then it runs the script once more with one byte of the checkpoint changed:
the script must stop before inference. Finally the attendee's own ``out.mp4`` must show the default
prompt (they ran the script themselves).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import sanacheck as sc  # noqa: E402
from labkit.check import Failure, expect, main, msg, run_script  # noqa: E402

FILES = ("infer_platform.sh", "npu.patch")  # what step 1 asks the attendee to change


def clean_copy(root: Path) -> Path:
    """The lab's own starter (upstream tree, weights) plus the attendee's two step-1 files."""
    ws = root / "sanavideo"
    ws.mkdir()
    shutil.copytree(sc.LAB / "starter" / "upstream", ws / "upstream")
    shutil.copytree(sc.LAB / "starter" / "weights", ws / "weights")
    for name in FILES:
        shutil.copy(Path(name), ws / name)
    # the lab's files are read-only where the check runs in a grader container: the copy is ours
    for path in [ws, *ws.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return ws


def run_platform(ws: Path, *args: str) -> tuple[bool, str]:
    """``bash infer_platform.sh ARGS`` in ``ws``: (it succeeded, the last lines it printed). Its
    ``python`` runs (the environment check, inference) are forked with torch already imported
    (``fork_python``): the same runs, outputs and exit statuses, without an interpreter start and
    ``import torch`` each (three of them were 3.5 of this check's 3.6 CPU-s)."""
    env = {"PYTHON": "python", "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"}
    res = run_script(
        ["bash", "-c", 'cd "$1" && shift && exec bash infer_platform.sh "$@"', "_", str(ws), *args],
        timeout=45,
        env=env,
        memory_mb=3072,
        fork_python=True,
    )
    out = (res.stdout + "\n" + res.stderr).strip()
    return res.ok, "\n".join(out.splitlines()[-6:])


def patch_problem(root: Path) -> str | None:
    """What `git apply --check` says about the attendee's npu.patch on a fresh 0.1.1 tree."""
    tree = root / "fresh"
    shutil.copytree(sc.UPSTREAM, tree)
    res = run_script(
        [
            "bash",
            "-c",
            'cd "$1" && git apply --check -v "$2"',
            "_",
            str(tree),
            str(Path("npu.patch").resolve()),
        ],
        timeout=20,
    )
    if res.ok:
        return None
    lines = [ln for ln in (res.stderr + res.stdout).splitlines() if "error" in ln or "does not apply" in ln]
    return "; ".join(lines[:3]) or res.stderr.strip()[-300:]


def check_tree(tree: Path) -> None:
    """The tree the script made: patched (no Triton, no CUDA), no rejects, the bundled weights."""
    pipeline = tree / "tinysana" / "pipeline.py"
    expect(
        pipeline.is_file(),
        msg(
            "infer_platform.sh did not set up TinySana/ (no TinySana/tinysana/pipeline.py after it ran).",
            "infer_platform.sh 没有建立 TinySana/（运行后没有 TinySana/tinysana/pipeline.py）。",
        ),
    )
    src = pipeline.read_text(encoding="utf-8")
    rejects = sorted(str(p.relative_to(tree.parent)) for p in tree.rglob("*.rej"))
    init = src.split("class TinySanaPipeline")[-1]
    half = 'torch.device("cuda")' in init or "use_triton_rms_norm(" in init or "get_device" not in init
    if "triton_rms_norm import" in src or half or rejects:
        raise Failure(
            msg(
                "The tree infer_platform.sh makes from a clean copy of the starter is not fully patched"
                + (": pipeline.py still hard-codes CUDA (the hunk that conflicts with 0.1.1)" if half else "")
                + (f"; rejected hunks left in {', '.join(rejects)}" if rejects else "")
                + ".",
                "infer_platform.sh 在干净的起始副本上生成的源码目录没有完整打上补丁"
                + ("：pipeline.py 仍写死了 CUDA（与 0.1.1 冲突的那个补丁块）" if half else "")
                + (f"；留下了被拒绝的补丁块 {', '.join(rejects)}" if rejects else "")
                + "。",
            ),
            [
                msg(
                    "Fix npu.patch itself: compare the failing hunk's '-' lines with TinySana 0.1.1's pipeline.py.",
                    "修正 npu.patch 本身：把失败补丁块中以 '-' 开头的行与 TinySana 0.1.1 的 pipeline.py 对比。",
                )
            ],
        )
    ckpt = tree / "checkpoints" / "tinysana.safetensors"
    expect(
        ckpt.is_file() and sc.sha256(ckpt) == sc.sha256(sc.WEIGHTS),
        msg(
            "infer_platform.sh did not put the bundled weights at TinySana/checkpoints/tinysana.safetensors.",
            "infer_platform.sh 没有把自带的权重放到 TinySana/checkpoints/tinysana.safetensors。",
        ),
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
    return sc.analyse(frames)


def check() -> tuple[str, dict]:
    for name in FILES:
        expect(
            Path(name).is_file(), msg(f"{name} is missing from the lab folder.", f"实验目录中缺少 {name}。")
        )
    expect(
        Path("TinySana/tinysana/pipeline.py").is_file(),
        msg(
            "There is no TinySana/ source tree yet: run `bash infer_platform.sh` (it copies "
            "upstream/TinySana-0.1.1 to TinySana/ and patches it).",
            "还没有 TinySana/ 源码目录：运行 `bash infer_platform.sh`（它把 upstream/TinySana-0.1.1 "
            "复制到 TinySana/ 并打补丁）。",
        ),
    )
    prompt = sc.checker_prompt(sc.run_rng("deploy"))
    with tempfile.TemporaryDirectory(prefix="sanavideo-deploy-") as tmp:
        root = Path(tmp)
        ws = clean_copy(root)
        ok, tail = run_platform(ws, prompt, "check.mp4")
        if not ok:
            bad_patch = patch_problem(root)
            raise Failure(
                msg(
                    f"From a clean copy of the starter, `bash infer_platform.sh {prompt!r} check.mp4` fails"
                    + (f": npu.patch does not apply to TinySana 0.1.1 ({bad_patch})" if bad_patch else "")
                    + f".\nLast lines:\n{tail}",
                    f"在干净的起始副本上，`bash infer_platform.sh {prompt!r} check.mp4` 运行失败"
                    + (f"：npu.patch 无法应用到 TinySana 0.1.1（{bad_patch}）" if bad_patch else "")
                    + f"。\n最后几行：\n{tail}",
                ),
                [
                    msg(
                        "The check runs your script on a fresh copy, so a tree fixed by hand does not count: "
                        "fix npu.patch (and the script) until one run works from scratch.",
                        "检查会在全新的副本上运行你的脚本，手工修好的源码目录不算数：请修正 npu.patch（和脚本），"
                        "直到从零开始一次就能跑通。",
                    )
                ],
            )
        check_tree(ws / "TinySana")
        clip = ws / "check.mp4"
        if not clip.is_file():
            wrote = [p.name for p in ws.glob("*.mp4")]
            raise Failure(
                msg(
                    f"`bash infer_platform.sh {prompt!r} check.mp4` wrote no check.mp4"
                    + (
                        f" (it wrote {', '.join(wrote)}): the script ignores its second argument, the output path."
                        if wrote
                        else "."
                    ),
                    f"`bash infer_platform.sh {prompt!r} check.mp4` 没有写出 check.mp4"
                    + (
                        f"（写出的是 {', '.join(wrote)}）：脚本忽略了第二个参数（输出路径）。"
                        if wrote
                        else "。"
                    ),
                )
            )
        seen = check_video(clip, prompt, f"the video for {prompt!r}")
        wrong = sc.mismatch(seen, prompt)
        if wrong is not None:
            default = sc.mismatch(seen, sc.PROMPT) is None
            raise Failure(
                msg(
                    f"`bash infer_platform.sh {prompt!r}` does not draw its prompt: {wrong}."
                    + (
                        " That is the default prompt: the script ignores its first argument."
                        if default
                        else ""
                    ),
                    f"`bash infer_platform.sh {prompt!r}` 没有画出它的提示词：{wrong}。"
                    + ("这是默认提示词：脚本忽略了第一个参数。" if default else ""),
                ),
                [msg('Pass "$1" (the prompt) on to inference.py.', '把 "$1"（提示词）传给 inference.py。')],
            )
        # the same script with one byte of the checkpoint changed must stop before inference
        shutil.rmtree(ws / "TinySana")
        clip.unlink()
        weights = ws / "weights" / "tinysana.safetensors"
        data = bytearray(weights.read_bytes())
        data[-100] ^= 0x01
        weights.write_bytes(bytes(data))
        ok, tail = run_platform(ws, prompt, "corrupt.mp4")
        if ok or (ws / "corrupt.mp4").exists():
            raise Failure(
                msg(
                    "infer_platform.sh carried on with a corrupted checkpoint (one byte changed): step [4/5] "
                    "must verify weights/tinysana.safetensors against its .sha256 and stop when it does not match.",
                    "infer_platform.sh 在权重被破坏（改了一个字节）时仍继续运行：[4/5] 步必须用 .sha256 校验 "
                    "weights/tinysana.safetensors，不一致就停下。",
                ),
                [
                    msg(
                        "sha256sum --check exits non-zero on a mismatch; set -e stops the script.",
                        "sha256sum --check 在不一致时返回非零；set -e 会让脚本停下。",
                    )
                ],
            )
    out = Path("out.mp4")
    expect(
        out.is_file(),
        msg(
            "out.mp4 is missing: run `bash infer_platform.sh`.",
            "缺少 out.mp4：运行 `bash infer_platform.sh`。",
        ),
    )
    first = check_video(out, sc.PROMPT, "out.mp4")
    wrong = sc.mismatch(first, sc.PROMPT)
    expect(
        wrong is None,
        msg(f"out.mp4 does not show {sc.PROMPT!r}: {wrong}.", f"out.mp4 没有呈现 {sc.PROMPT!r}：{wrong}。"),
        [msg("Run the script again with its default prompt.", "用默认提示词重新运行脚本。")],
    )
    return (
        msg(
            f"Deployed in one click: from a clean copy, infer_platform.sh patched TinySana, verified the weights "
            f"(and refused a corrupted copy) and drew {prompt!r}; out.mp4 shows {sc.describe(first)}.",
            f"一键部署完成：在干净的副本上，infer_platform.sh 打好补丁、校验了权重（并拒绝了被破坏的权重），"
            f"画出了 {prompt!r}；out.mp4 呈现 {sc.describe(first)}。",
        ),
        {"frames": sc.FRAMES, "dx_px": first["dx"], "dy_px": first["dy"]},
    )


main(check)
