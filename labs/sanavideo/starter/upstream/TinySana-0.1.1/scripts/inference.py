"""Sample one video: python scripts/inference.py --prompt "a red circle moving right" --out out.mp4"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tinysana.pipeline import TinySanaPipeline  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--out", type=Path, default=Path("out.mp4"))
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "checkpoints" / "tinysana.safetensors")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.checkpoint.exists():
        sys.exit(f"no weights at {args.checkpoint}: put the checkpoint there first")
    import torch

    torch.set_num_threads(1)
    pipe = TinySanaPipeline(args.checkpoint)
    t0 = time.perf_counter()
    path = pipe.save_video(args.prompt, args.out, seed=args.seed)
    print(f"wrote {path} for {args.prompt!r} on {pipe.device} in {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()
