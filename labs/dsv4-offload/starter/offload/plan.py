"""Step 1: the memory plan. Why the whole model cannot fit, and what the recipe puts where.

``python -m offload.plan`` (or ``bash recipe/scripts/launch_ds4flash_npu.sh --plan-only``):

1. tries the naive deployment (every weight on the card, experts in W8A8) on the emulated
   device and prints the out-of-memory error with the biggest holders;
2. computes the recipe's plan with :func:`plan_memory`, checks that it fits by allocating it on
   a fresh emulated card, and writes ``plan.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from dsv4flash import REAL, Checkpoint, ModelConfig, toy_scale
from labkit import emu

from . import recipe as recipe_mod
from .device import mxfp4_bytes, w8a8_bytes
from .recipe import Recipe

PLAN_FILE = Path("plan.json")


def expert_w8a8_bytes(cfg: ModelConfig) -> int:
    """One routed (or shared) expert on the device: gate_up ``[2I, D]`` + down ``[D, I]``, W8A8."""
    return w8a8_bytes(2 * cfg.moe_inter, cfg.d_model) + w8a8_bytes(cfg.d_model, cfg.moe_inter)


def expert_mxfp4_bytes(cfg: ModelConfig) -> int:
    """One routed expert in the host pool, native MXFP4."""
    return mxfp4_bytes(2 * cfg.moe_inter, cfg.d_model) + mxfp4_bytes(cfg.d_model, cfg.moe_inter)


def static_bytes(cfg: ModelConfig) -> dict[str, int]:
    """Everything but the routed experts: never offloaded (router and shared experts included)."""
    d, hd = cfg.d_model, cfg.head_dim
    attn = (
        w8a8_bytes(cfg.n_heads * hd, d)
        + 2 * w8a8_bytes(cfg.n_kv_heads * hd, d)
        + w8a8_bytes(d, cfg.n_heads * hd)
    )
    return {
        "embed_lm_head": 2 * cfg.vocab_size * d * 2,  # bf16
        "norms": (2 * cfg.n_layers + 1) * d * 4,
        "attention": cfg.n_layers * attn,
        "router": cfg.n_layers * cfg.n_routed_experts * d * 2,  # bf16
        "shared_experts": cfg.n_layers * cfg.n_shared_experts * expert_w8a8_bytes(cfg),
    }


def plan_memory(cfg: ModelConfig, recipe: Recipe) -> dict[str, int]:
    """Device bytes per tag under the recipe: the static part, the hot experts, the KV cache and
    the streaming-prefill staging buffer (MXFP4 codes + their W8A8 conversion, one chunk)."""
    tags = static_bytes(cfg)  # noqa: F841  (extend it below)
    # TODO (step 1): add three tags, in bytes:
    #   "hot_experts":    KT_NUM_GPU_EXPERTS experts per layer, every layer, W8A8 (expert_w8a8_bytes)
    #   "kv_cache":       CONTEXT_LENGTH tokens x layers x (K and V) x n_kv_heads x head_dim x 2 (bf16)
    #   "prefill_stream": one chunk of KT_PREFILL_STREAM_CHUNK experts, MXFP4 + its W8A8 conversion
    raise NotImplementedError("step 1: plan_memory (hot_experts, kv_cache, prefill_stream)")


def try_full_model(cfg: ModelConfig, recipe: Recipe) -> emu.OutOfDeviceMemory | None:
    """The naive deployment: every weight on the card. Returns the OOM it hits (or None)."""
    with emu.session(recipe.PROFILE, scale=toy_scale(cfg), measurer=False) as s:
        try:
            for tag, n in static_bytes(cfg).items():
                s.memory.alloc(tag, n)
            for _ in range(cfg.n_layers * cfg.n_routed_experts):  # one expert at a time
                s.memory.alloc("routed_experts", expert_w8a8_bytes(cfg))
        except emu.OutOfDeviceMemory as oom:
            return oom
    return None


def make_plan(recipe: Recipe | None = None) -> dict[str, object]:
    rec = recipe or recipe_mod.load()
    cfg = Checkpoint.load().cfg
    oom = try_full_model(cfg, rec)
    tags = plan_memory(cfg, rec)
    weights = sum(v for k, v in tags.items() if k not in ("kv_cache", "prefill_stream"))
    with emu.session(rec.PROFILE, scale=toy_scale(cfg), measurer=False) as s:
        capacity = s.memory.capacity
        fits, why = True, ""
        try:
            for tag, n in tags.items():
                s.memory.alloc(tag, n)
        except emu.OutOfDeviceMemory as err:
            fits, why = False, str(err)
    full = sum(static_bytes(cfg).values()) + cfg.n_layers * cfg.n_routed_experts * expert_w8a8_bytes(cfg)
    return {
        "profile": rec.PROFILE,
        "scale": toy_scale(cfg),
        "capacity_bytes": capacity,
        "full_model": {
            "device_bytes": full,
            "oom": str(oom) if oom else "",
            "holders": [[t, n] for t, n in oom.holders] if oom else [],
        },
        "tags": tags,
        "static_weight_bytes": weights,
        "static_fraction": weights / capacity,
        "real_static_fraction": REAL["static_device_bytes"] / REAL["device_bytes"],
        "total_bytes": sum(tags.values()),
        "fits": fits,
        "why_not": why,
        "host_pool_bytes": cfg.n_layers * cfg.n_routed_experts * expert_mxfp4_bytes(cfg),
        "recipe": rec.to_dict(),
    }


def main() -> None:
    plan = make_plan()
    full = plan["full_model"]
    print("== naive deployment: the whole model on the card ==")
    print(full["oom"] or "it fits?!")  # type: ignore[index]
    print()
    print(f"== the recipe's plan ({plan['profile']}, capacity {emu.fmt_bytes(plan['capacity_bytes'])}) ==")  # type: ignore[arg-type]
    for tag, n in plan["tags"].items():  # type: ignore[attr-defined]
        print(f"  {tag:<16} {emu.fmt_bytes(n):>12}  {100 * n / plan['capacity_bytes']:5.1f} %")  # type: ignore[operator]
    print(
        f"  static weights {100 * plan['static_fraction']:.1f} % of the card "  # type: ignore[operator]
        f"(real deployment: 48.3 GB of 64 GB = {100 * plan['real_static_fraction']:.1f} %)"  # type: ignore[operator]
    )
    print(f"  host pool (all experts, MXFP4): {emu.fmt_bytes(plan['host_pool_bytes'])}")  # type: ignore[arg-type]
    print("  fits" if plan["fits"] else f"  DOES NOT FIT: {plan['why_not']}")
    PLAN_FILE.write_text(json.dumps(plan, indent=2) + "\n")
    print(f"wrote {PLAN_FILE}")
    if not plan["fits"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
