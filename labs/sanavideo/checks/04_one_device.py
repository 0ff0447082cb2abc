"""Step 4: the whole pipeline fits the emulated card, stage by stage; report its peak memory."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder, not the attendee's

import sanacheck as sc  # noqa: E402
from labkit.check import Failure, expect, main, msg  # noqa: E402


def kib(n: float) -> str:
    return f"{n / 1024:.0f} KiB"


def check() -> tuple[str, dict]:
    expect(
        Path("TinySana/tinysana/layers.py").is_file(),
        msg(
            "Do step 1 first: run_single_device.py imports the TinySana/ tree that infer_platform.sh sets up.",
            "请先完成第 1 步：run_single_device.py 导入 infer_platform.sh 建立的 TinySana/ 源码目录。",
        ),
    )
    res = sc.run_harness("one_device", "run_single_device.py", sc.PROMPT, 0)
    cap = res["capacity"]
    stages = ", ".join(f"{t} {kib(n)}" for t, n in res["stage_bytes"].items())
    if "oom" in res:
        holders = ", ".join(f"{t} {kib(n)}" for t, n in res["oom_holders"].items()) or "nothing"
        tip = []
        if len(res["oom_holders"]) > 1 or (res["oom_holders"] and res["oom_tag"] not in res["oom_holders"]):
            tip.append(
                msg(
                    "Free each stage once it is done (offload.to_host): the text encoder is not needed "
                    "after the prompt is encoded, the DiT not after sampling.",
                    "每个阶段结束就释放它（offload.to_host）：提示词编码后不再需要文本编码器，采样后不再需要 DiT。",
                )
            )
        if res["oom_tag"] == "activations":
            tip.append(
                msg(
                    "The VAE decoding the whole clip at once needs activations for every frame: decode it chunk "
                    "by chunk (model.vae.decode(latent, chunk=1)); the CACHE_T=2 cache keeps the result identical.",
                    "VAE 一次解码整段视频需要所有帧的激活：请分块解码（model.vae.decode(latent, chunk=1)），"
                    "CACHE_T=2 缓存保证结果不变。",
                )
            )
        raise Failure(
            msg(
                f"Out of device memory ({kib(cap)} card): asked {kib(res['oom_requested'])} for "
                f"{res['oom_tag']!r} while holding {holders}. Stage weights: {stages}.",
                f"设备内存不足（{kib(cap)} 的卡）：为 {res['oom_tag']!r} 申请 {kib(res['oom_requested'])} 时已占用 "
                f"{holders}。各阶段权重：{stages}。",
            ),
            tip,
        )
    if "not_on_device" in res:
        raise Failure(
            msg(
                f"A stage ran from host memory: {res['not_on_device']}.",
                f"有阶段在主机内存上运行：{res['not_on_device']}。",
            ),
            [
                msg(
                    "Put a stage on the device before it runs and take it off afterwards.",
                    "阶段运行前放到设备上，运行后再移走。",
                )
            ],
        )
    frames, ref = res["frames"], res["ref"]
    expect(
        tuple(frames.shape) == tuple(ref.shape),
        msg(
            f"generate_on_one_device returned shape {tuple(frames.shape)}, want {tuple(ref.shape)} (T, H, W, 3) uint8.",
            f"generate_on_one_device 返回的形状是 {tuple(frames.shape)}，应为 {tuple(ref.shape)}（T, H, W, 3）uint8。",
        ),
    )
    diff = float((frames.float() - ref.float()).abs().max())
    expect(
        diff <= 1,
        msg(
            f"The clip differs from the single-shot pipeline by up to {diff:.0f}/255: staging and chunked decoding "
            "must not change the video.",
            f"视频与一次性运行的流水线最多相差 {diff:.0f}/255：分阶段与分块解码不应改变视频。",
        ),
    )
    left = {t: n for t, n in res["left_on_device"].items() if n}
    peak = res["peak"]
    breakdown = ", ".join(f"{t} {kib(n)}" for t, n in res["peak_by_tag"].items())
    return (
        msg(
            f"Fits one card: peak {kib(peak)} of {kib(cap)} ({100 * peak / cap:.0f}%), at the peak: {breakdown}"
            + (f"; still on the device at the end: {', '.join(left)}" if left else "")
            + ".",
            f"单卡可以容纳：峰值 {kib(peak)} / {kib(cap)}（{100 * peak / cap:.0f}%），峰值时：{breakdown}"
            + (f"；结束时仍在设备上：{', '.join(left)}" if left else "")
            + "。",
        ),
        {"peak_kib": peak / 1024, "capacity_kib": cap / 1024, "peak_fraction": peak / cap},
    )


main(check)
