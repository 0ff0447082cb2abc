"""Step 4: the whole pipeline on one emulated card (64 GiB scaled as the weights are), one stage's
weights at a time and the VAE one latent frame at a time; report the peak.

The card is roomy, as the real one is, so the check does not wait for an out-of-memory error: it
watches the process. While each stage runs, no other stage's weights may be on the card; the VAE's
largest activation must be one latent frame deep (the checker's own staged run gives the bar); the
clip must equal the single-shot pipeline's for a prompt and seed chosen for this run."""

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
    rng = sc.run_rng("one-device")
    prompt, seed = sc.checker_prompt(rng), rng.randrange(1, 1000)
    res = sc.run_harness("one_device", "run_single_device.py", prompt, seed)
    cap = res["capacity"]
    stages = ", ".join(f"{t} {kib(n)}" for t, n in res["stage_bytes"].items())
    if "oom" in res:
        holders = ", ".join(f"{t} {kib(n)}" for t, n in res["oom_holders"].items()) or "nothing"
        raise Failure(
            msg(
                f"Out of device memory ({kib(cap)} card): asked {kib(res['oom_requested'])} for "
                f"{res['oom_tag']!r} while holding {holders}. Stage weights: {stages}.",
                f"设备内存不足（{kib(cap)} 的卡）：为 {res['oom_tag']!r} 申请 {kib(res['oom_requested'])} 时已占用 "
                f"{holders}。各阶段权重：{stages}。",
            )
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
    for running, others in res["overlaps"].items():
        held = ", ".join(f"{t} ({kib(n)})" for t, n in others.items())
        raise Failure(
            msg(
                f"While the {running} stage ran, the weights of {held} were still on the card: each stage's "
                "weights belong on the card only while that stage runs (free the previous stage before you "
                "load the next).",
                f"{running} 阶段运行时，{held} 的权重仍在卡上：每个阶段的权重只应在该阶段运行时留在卡上"
                "（先释放上一个阶段，再放入下一个）。",
            ),
            [
                msg(
                    "offload.to_host(tag) right after the stage's last call, before the next offload.to_device.",
                    "在该阶段最后一次调用之后、下一次 offload.to_device 之前调用 offload.to_host(tag)。",
                )
            ],
        )
    left = {t: n for t, n in res.get("left_on_device", {}).items() if t in res["stage_bytes"] and n > 0}
    if left:
        held = ", ".join(f"{t} ({kib(n)})" for t, n in left.items())
        raise Failure(
            msg(
                f"After generate_on_one_device returned, the weights of {held} were still on the card: the last "
                "stage must leave the card too, or the next clip starts with them on it next to the text encoder.",
                f"generate_on_one_device 返回后，{held} 的权重仍在卡上：最后一个阶段也要离开卡，"
                "否则下一个视频开始时它们会与文本编码器同时在卡上。",
            ),
            [
                msg(
                    "offload.to_host(tag) after the stage's last call, the VAE's included.",
                    "每个阶段最后一次调用之后都要 offload.to_host(tag)，VAE 也不例外。",
                )
            ],
        )
    depth, ref_depth = res["act_depth"].get("vae", 0), res["ref_act_depth"]["vae"]
    if depth > ref_depth:
        raise Failure(
            msg(
                f"The VAE decodes {depth / ref_depth:.0f} latent frames at a time: its largest activation is "
                f"{kib(depth)}, one frame at a time needs {kib(ref_depth)}. Activations grow with the frames decoded "
                "together: decode one latent frame at a time (chunk=1); the CACHE_T=2 cache keeps the result the same.",
                f"VAE 每次解码 {depth / ref_depth:.0f} 个潜空间帧：最大的一次激活占 {kib(depth)}，"
                f"逐帧解码只需 {kib(ref_depth)}。激活内存随同时解码的帧数增长：请每次解码一个潜空间帧（chunk=1），"
                "CACHE_T=2 缓存保证结果不变。",
            )
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
            f"For {prompt!r} with seed {seed}, the clip differs from the single-shot pipeline by up to {diff:.0f}/255: "
            "staging and chunked decoding must not change the video (does the function use its prompt and seed, "
            "and decode through the CACHE_T cache?).",
            f"对 {prompt!r}（seed {seed}），视频与一次性运行的流水线最多相差 {diff:.0f}/255：分阶段与分块解码不应改变视频"
            "（函数是否用了传入的提示词和 seed，解码是否经过 CACHE_T 缓存？）。",
        ),
    )
    peak, ref_peak = res["peak"], res["ref_peak"]
    weights = sum(res["stage_bytes"].values())
    breakdown = ", ".join(f"{t} {kib(n)}" for t, n in res["peak_by_tag"].items())
    return (
        msg(
            f"One card, one stage at a time: peak {kib(peak)} of {kib(cap)} ({100 * peak / cap:.0f}%; at the peak: "
            f"{breakdown}), against {kib(weights)} of weights ({100 * weights / cap:.1f}% of the card, as SANA-Video's "
            f"~9.5 GB are of 64 GiB). The rest of the card is room for longer or larger clips.",
            f"单卡、逐阶段运行：峰值 {kib(peak)} / {kib(cap)}（{100 * peak / cap:.0f}%；峰值时：{breakdown}），"
            f"全部权重 {kib(weights)}（占卡的 {100 * weights / cap:.1f}%，与 SANA-Video 约 9.5 GB 占 64 GiB 的比例相同）。"
            "卡上其余的空间留给更长或更大的视频。",
        ),
        {
            "peak_kib": peak / 1024,
            "capacity_kib": cap / 1024,
            "peak_fraction": peak / cap,
            "reference_peak_kib": ref_peak / 1024,
            "weights_fraction": weights / cap,
        },
    )


main(check)
