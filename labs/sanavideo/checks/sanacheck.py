"""Shared helpers of the sanavideo checkers (not a step checker itself).

Paths of the trusted lab files, MP4 probing through imageio-ffmpeg, and ``analyse(frames)``:
what a clip shows (colour of the blob, direction its centroid moves, rough shape) so a checker
can tell whether a video matches its prompt.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
from pathlib import Path

import numpy as np

LAB = Path(__file__).resolve().parents[1]
UPSTREAM = LAB / "starter" / "upstream" / "TinySana-0.1.1"
WEIGHTS = LAB / "starter" / "weights" / "tinysana.safetensors"
HARNESS = Path(__file__).resolve().parent / "sana_harness.py"

FRAMES, SIZE, FPS = 8, 32, 8
PROMPT = "a red circle moving right"  # the prompt step 1 asks for

if str(UPSTREAM) not in sys.path:
    sys.path.insert(0, str(UPSTREAM))

from tinysana.prompts import COLOURS, DIRECTIONS, all_prompts, parse  # noqa: E402


def run_rng(step: str) -> random.Random:
    """Choices the attendee cannot have seen: seeded by the run (``LAB_RUN_ID``, fresh for every
    check run and hidden from attendee code) and the step."""
    run = os.environ.get("LAB_RUN_ID") or "local"
    return random.Random(hashlib.sha256(f"sanavideo/{step}/{run}".encode()).digest())


def checker_prompt(rng: random.Random) -> str:
    """A prompt whose colour or direction differs from the default's (TinySana draws colour and
    direction right for all 48 prompts at seed 0: training/evaluate.py), so a script that ignores
    its prompt is seen."""
    colour, _, direction = parse(PROMPT)
    return rng.choice([p for p in all_prompts() if (parse(p)[0], parse(p)[2]) != (colour, direction)])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def probe_mp4(path: Path) -> tuple[np.ndarray, dict]:
    """Decode an MP4: (frames uint8 (T, H, W, 3), metadata with 'codec', 'fps', 'size')."""
    import imageio_ffmpeg

    gen = imageio_ffmpeg.read_frames(str(path))
    meta = next(gen)
    w, h = meta["size"]
    frames = [np.frombuffer(buf, dtype=np.uint8).reshape(h, w, 3) for buf in gen]
    return (np.stack(frames) if frames else np.zeros((0, h, w, 3), np.uint8)), meta


def analyse(frames: np.ndarray) -> dict:
    """What a clip shows: {'colour', 'direction', 'shape', 'dx', 'dy', 'fg_px', 'colour_dist'}.

    The foreground is every pixel clearly brighter than the black background; its mean colour
    is matched to the nearest named colour, its centroid's motion over the clip (least-squares
    slope times the clip length) gives the direction (None if it moves less than 4 pixels).
    """
    f = np.asarray(frames, dtype=np.float64)
    fg = f.max(axis=-1) > 90
    ys, xs = np.mgrid[0 : f.shape[1], 0 : f.shape[2]]
    cx, cy, ts, fills = [], [], [], []
    for t in range(f.shape[0]):
        m = fg[t]
        if m.sum() < 6:
            continue
        cx.append(xs[m].mean())
        cy.append(ys[m].mean())
        ts.append(t)
        box = (xs[m].max() - xs[m].min() + 1) * (ys[m].max() - ys[m].min() + 1)
        fills.append(m.sum() / box)
    out: dict = {"colour": None, "direction": None, "shape": None, "dx": 0.0, "dy": 0.0}
    out["fg_px"] = float(fg.sum() / max(1, f.shape[0]))
    if len(ts) < max(2, f.shape[0] // 2):
        return out
    mean_rgb = f[fg].mean(axis=0)
    dists = {name: float(np.linalg.norm(mean_rgb - np.array(rgb))) for name, rgb in COLOURS.items()}
    out["colour"] = min(dists, key=dists.__getitem__)
    out["colour_dist"] = dists[out["colour"]]
    span = f.shape[0] - 1
    out["dx"] = float(np.polyfit(ts, cx, 1)[0] * span)
    out["dy"] = float(np.polyfit(ts, cy, 1)[0] * span)
    if max(abs(out["dx"]), abs(out["dy"])) >= 4.0:
        if abs(out["dx"]) >= abs(out["dy"]):
            out["direction"] = "right" if out["dx"] > 0 else "left"
        else:
            out["direction"] = "down" if out["dy"] > 0 else "up"
    fill = float(np.median(fills))
    out["fill"] = fill
    out["shape"] = "square" if fill > 0.88 else "circle" if fill > 0.64 else "triangle"
    return out


def describe(a: dict) -> str:
    from labkit.check import msg

    if a["colour"] is None:
        return msg("no clear coloured object (mostly background)", "没有清晰的彩色物体（几乎全是背景）")
    moved = f"dx={a['dx']:+.1f}, dy={a['dy']:+.1f} px"
    if a["direction"]:
        return msg(
            f"a {a['colour']} object moving {a['direction']} (centroid moved {moved})",
            f"一个 {a['colour']} 物体向 {a['direction']} 移动（质心移动 {moved}）",
        )
    return msg(
        f"a {a['colour']} object not moving clearly (centroid moved {moved})",
        f"一个 {a['colour']} 物体没有明显移动（质心移动 {moved}）",
    )


def mismatch(a: dict, prompt: str) -> str | None:
    """None if the clip analysed as ``a`` shows ``prompt``'s colour and direction, else why not."""
    colour, _shape, direction = parse(prompt)
    if a["colour"] != colour or a["direction"] != direction:
        from labkit.check import msg

        return msg(
            f"expected a {colour} object moving {direction}, the video shows {describe(a)}",
            f"应为一个向 {direction} 移动的 {colour} 物体，视频中是{describe(a)}",
        )
    return None


__all__ = [
    "COLOURS",
    "DIRECTIONS",
    "analyse",
    "checker_prompt",
    "run_rng",
    "describe",
    "mismatch",
    "probe_mp4",
    "run_harness",
    "sha256",
]


def run_harness(func: str, attendee_file: str, *args: object, timeout: float = 50) -> dict:
    """Run ``sana_harness.<func>`` in a child process (where it imports ``attendee_file``); an
    error in the attendee's code fails the step, shown with their own traceback lines."""
    from labkit.check import Failure, describe_error, run_function

    r = run_function(str(HARNESS), func, *args, timeout=timeout, memory_mb=3072)
    if r.error is not None:
        raise Failure(describe_error(attendee_file, r.error, r.stderr))
    return r.value  # type: ignore[no-any-return]
