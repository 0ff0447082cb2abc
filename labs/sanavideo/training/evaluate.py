"""How often TinySana's videos show their prompt (colour, direction, shape), over all 48 prompts.

python labs/sanavideo/training/evaluate.py labs/sanavideo/starter/weights/tinysana.safetensors
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "checks"))

import sanacheck  # noqa: E402  (puts the upstream TinySana on sys.path)
from tinysana.model import TinySana  # noqa: E402
from tinysana.prompts import all_prompts, parse  # noqa: E402
from tinysana.sampling import generate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("weights", type=Path)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--shift", type=float, help="override the checkpoint's flow_shift")
    ap.add_argument("--cfg", type=float, help="override the checkpoint's cfg_scale")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = TinySana.load(args.weights)
    if args.shift:
        model.sampling["flow_shift"] = args.shift
    if args.cfg:
        model.sampling["cfg_scale"] = args.cfg
    ok = {"colour": 0, "direction": 0, "shape": 0, "both": 0}
    n = 0
    t0 = time.perf_counter()
    for prompt in all_prompts():
        want = dict(zip(("colour", "shape", "direction"), parse(prompt), strict=True))
        for seed in range(args.seeds):
            a = sanacheck.analyse(generate(model, prompt, seed=seed).numpy())
            n += 1
            for k in ("colour", "direction", "shape"):
                ok[k] += a[k] == want[k]
            ok["both"] += a["colour"] == want["colour"] and a["direction"] == want["direction"]
            if a["colour"] != want["colour"] or a["direction"] != want["direction"]:
                print(f"MISS {prompt!r} seed {seed}: {sanacheck.describe(a)}")
    dt = (time.perf_counter() - t0) / n
    print(" ".join(f"{k} {v}/{n}" for k, v in ok.items()), f"({dt:.2f} s per clip)")


if __name__ == "__main__":
    main()
