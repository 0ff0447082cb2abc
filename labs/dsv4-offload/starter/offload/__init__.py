"""offload: DeepSeek-V4-Flash on one (emulated) card, hot experts on the device, cold ones on the CPU.

Modules, in the order the lab's steps use them:

- :mod:`.recipe`: the recipe's settings (``recipe/config/dsv4_flash_toy.env`` + environment);
- :mod:`.plan`: the memory plan (step 1);
- :mod:`.device`: the emulated card: weights placed with a tag, W8A8 matmuls, copies;
- :mod:`.cpu_kernel`: the CPU expert kernel: MXFP4 -> GGUF repack, MXFP4 x Q8_0 GEMV (step 2);
- :mod:`.engine`: the offload engine: placement, routing, overlap, residency, streaming (steps 2-5);
- :mod:`.residency`: counting expert use during prefill, choosing the hot set (step 4);
- :mod:`.harness`: serving a list of requests in one emulation session, with measurements.
"""
