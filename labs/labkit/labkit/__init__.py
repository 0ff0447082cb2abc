"""labkit: the runtime inside every lab environment.

Submodules (import the one you need; ``import labkit`` alone loads nothing heavy):

- ``labkit.device``: which device this lab runs on (a real NPU through torch_npu, or CPU emulation);
- ``labkit.npu``: fused ops with torch_npu's signatures, forwarding to torch_npu on an NPU and
  running a reference implementation (charged to the emulated device) on CPU;
- ``labkit.emu``: the emulated device: memory budget, transfers, roofline cost model, streams;
- ``labkit.mx``: OCP Microscaling formats (MXFP4, MXFP8): quantize, dequantize, quantized linear;
- ``labkit.check``: the checker side of labserver's checker protocol;
- ``labkit.models``: tiny reference models with shipped weights.

labkit depends on torch, numpy and safetensors only (never on labserver). Reference:
docs/labkit.md.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
