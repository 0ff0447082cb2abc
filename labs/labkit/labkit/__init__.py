"""labkit: the runtime inside every lab environment.

Submodules (import the one you need; ``import labkit`` alone loads nothing heavy):

- ``labkit.device``: which device this lab runs on (a real NPU through torch_npu, or CPU emulation);
- ``labkit.npu``: fused ops with torch_npu's signatures, forwarding to torch_npu on an NPU and
  running a reference implementation (charged to the emulated device) on CPU;
- ``labkit.emu``: the emulated device: memory budget, transfers, roofline cost model, streams;
- ``labkit.mx``: OCP Microscaling formats (MXFP4, MXFP8): quantize, dequantize, quantized linear;
- ``labkit.check``: the checker side of labserver's checker protocol;
- ``labkit.models``: tiny reference models with shipped weights;
- ``labkit.npu_fake``: a FAKE ``torch_npu`` on CPU for tests of the NPU code path, installed only
  by ``install()`` or ``LABKIT_FAKE_NPU=N`` in the environment.

labkit depends on torch, numpy and safetensors only (never on labserver). Reference:
docs/labkit.md.
"""

import os as _os

__version__ = "0.1.0"
__all__ = ["__version__"]

if _os.environ.get("LABKIT_FAKE_NPU", "").strip() not in ("", "0"):
    # NPU mode on a CPU-only machine (tests): a FAKE torch_npu, see labkit.npu_fake
    from .npu_fake import install as _install_fake_npu

    _install_fake_npu()
