"""A tiny matrix multiplication on your device; writes what it did to warmup.json.

``python warmup.py`` uses seed 7; ``--seed N`` draws other matrices (the checker runs a copy of
this script on a seed of its own)."""

import argparse
import json

import torch
from labkit.device import get_device

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--seed", type=int, default=7)
args = parser.parse_args()

device = get_device()
torch.manual_seed(args.seed)
a = torch.randn(64, 64)
b = torch.randn(64, 64)
c = (a.to(device.torch_device) @ b.to(device.torch_device)).cpu()
record = {
    "device": device.kind,
    "seed": args.seed,
    "shape": list(c.shape),
    "trace": round(float(c.trace()), 4),
}
with open("warmup.json", "w") as f:
    json.dump(record, f)
print("wrote warmup.json:", record)
