"""A tiny matrix multiplication on your device; writes what it did to warmup.json."""

import json

import torch
from labkit.device import get_device

device = get_device()
torch.manual_seed(7)
a = torch.randn(64, 64)
b = torch.randn(64, 64)
c = (a.to(device.torch_device) @ b.to(device.torch_device)).cpu()
record = {"device": device.kind, "shape": list(c.shape), "trace": round(float(c.trace()), 4)}
with open("warmup.json", "w") as f:
    json.dump(record, f)
print("wrote warmup.json:", record)
