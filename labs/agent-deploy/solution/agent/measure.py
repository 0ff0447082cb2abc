"""How a skill is measured: emulated decode time per token and device memory, steady state."""

from __future__ import annotations

from labkit import emu

PROFILE = "950PR"  # the Ascend 950 of the talk's 103.18 -> 17.98 ms run


def measure(model, prompts, n, profile=PROFILE):
    """Steady-state decode figures over ``prompts``, ``n`` new tokens each.

    Each prompt runs once to warm up (graph capture and compile happen there, once per step
    shape, on this very model) and once inside an emulation session. Prefill is not charged,
    and its token is the first of the ``n``, so a run decodes ``n - 1`` tokens."""
    total_ms, tokens, launches = 0.0, 0, 0
    ops = {}
    for p in prompts:
        model.generate(p, n)  # warm-up
        with emu.session(profile, measurer=False) as s:
            model.generate(p, n)
        rep = s.report()
        total_ms += rep.elapsed_ms
        tokens += n - 1
        launches += rep.launches
        for name, st in rep.ops.items():
            o = ops.setdefault(name, {"time_ms": 0.0, "launches": 0, "flops": 0.0, "bytes": 0.0})
            o["time_ms"] += st.time_ms
            o["launches"] += st.launches
            o["flops"] += st.flops
            o["bytes"] += st.bytes
    per_op = {k: {f: v / tokens for f, v in o.items()} for k, o in ops.items()}
    return {
        "ms_per_token": total_ms / tokens,
        "launches_per_token": launches / tokens,
        "weight_bytes": model.weight_bytes(),
        "ops": per_op,
    }


def profile(model, prompts, n, profile=PROFILE):
    """Where a decode token's time goes: launch overhead, compute and memory traffic (ms per
    token each, from the cost model's rates), and which of them bounds the step."""
    m = measure(model, prompts, n, profile)
    prof = emu.get_profile(profile)
    scale = emu.DEFAULT_SCALE
    launch_s = (prof.graph_launch_overhead if model.graph else prof.launch_overhead).value
    flops = sum(o["flops"] for o in m["ops"].values())
    nbytes = sum(o["bytes"] for o in m["ops"].values())
    out = dict(m)
    out["launch_ms"] = m["launches_per_token"] * launch_s * 1e3
    out["compute_ms"] = flops / (prof.peak("fp16") * scale) * 1e3
    out["memory_ms"] = nbytes / (prof.hbm_bandwidth.value * scale) * 1e3
    parts = {k: out[f"{k}_ms"] for k in ("launch", "compute", "memory")}
    out["bound"] = max(parts, key=parts.get)
    out["top_ops"] = sorted(((k, o["time_ms"]) for k, o in m["ops"].items()), key=lambda kv: -kv[1])[:5]
    return out
