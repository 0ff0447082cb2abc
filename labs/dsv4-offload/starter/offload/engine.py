"""The offload engine: DeepSeek-V4-Flash (toy) on one emulated card plus the host CPU.

What lives where (as in the recipe):

- device: embeddings/LM head, attention, router and shared expert of every layer, the KV cache,
  and ``KT_NUM_GPU_EXPERTS`` routed experts per layer ("hot", W8A8 int8);
- host: every routed expert in native MXFP4 (GGUF layout), computed there by the CPU kernel.

A token's routed experts go to where they live: resident ones are computed on the device, the
others on the CPU; the activations travel (a few hundred bytes), never the expert weights.
"""

from __future__ import annotations

from contextlib import nullcontext  # noqa: F401  (step 3 uses it)

import torch
from dsv4flash import mxfp4
from dsv4flash.model import Checkpoint, attend, rms_norm, rope
from labkit import emu

from . import residency
from .cpu_kernel import CpuExperts
from .device import W8, Device, mxfp4_bytes, w8a8_bytes
from .recipe import Recipe

HOT_TAG = "hot_experts"
STREAM_TAG = "prefill_stream"


class OffloadEngine:
    def __init__(self, ckpt: Checkpoint, recipe: Recipe, session: emu.EmuSession):
        self.ckpt, self.cfg, self.recipe, self.s = ckpt, ckpt.cfg, recipe, session
        self.dev = Device(session)
        self.cpu = CpuExperts(ckpt)
        c = self.cfg
        self.expert_w8a8_bytes = w8a8_bytes(2 * c.moe_inter, c.d_model) + w8a8_bytes(c.d_model, c.moe_inter)
        self.expert_mxfp4_bytes = mxfp4_bytes(2 * c.moe_inter, c.d_model) + mxfp4_bytes(
            c.d_model, c.moe_inter
        )
        #: per layer: expert id -> its W8A8 (gate_up, down) on the device
        self.resident: list[dict[int, tuple[W8, W8]]] = [{} for _ in range(c.n_layers)]
        self.phase = "prefill"
        #: routed slots served by resident experts / all routed slots, per phase
        self.slots = {"prefill": [0, 0], "decode": [0, 0]}
        #: (layer, expert ids [n, top_k]) of every MoE call of the current prefill
        self.routing: list[tuple[int, torch.Tensor]] = []
        self.streamed_prefill = False

    # -- placement ---------------------------------------------------------------------------
    def load(self) -> None:
        """Place the static part on the device, then the first K experts of every layer."""
        c, ck, dev = self.cfg, self.ckpt, self.dev
        self.embed = ck["embed.weight"].float()
        self.lm_head = ck["lm_head.weight"].float()
        dev.place("embed_lm_head", 2 * c.vocab_size * c.d_model * 2)
        dev.place("norms", (2 * c.n_layers + 1) * c.d_model * 4)
        self.layers = []
        for i in range(c.n_layers):
            p = f"layers.{i}."
            attn = {
                n: W8(ck[p + f"attn.{n}.weight"], ck[p + f"attn.{n}.scale"]) for n in ("wq", "wk", "wv", "wo")
            }
            dev.place("attention", sum(w.nbytes for w in attn.values()))
            router = ck[p + "ffn.gate.weight"].float()
            dev.place("router", router.numel() * 2)
            shared = tuple(
                W8(ck[p + f"ffn.shared_experts.{n}.weight"], ck[p + f"ffn.shared_experts.{n}.scale"])
                for n in ("gate_up", "down")
            )
            dev.place("shared_experts", sum(w.nbytes for w in shared))
            self.layers.append(
                {
                    **attn,
                    "router": router,
                    "shared": shared,
                    "attn_norm": ck[p + "attn_norm.weight"],
                    "ffn_norm": ck[p + "ffn_norm.weight"],
                }
            )
        kv_per_token = c.n_layers * 2 * c.n_kv_heads * c.head_dim * 2  # K and V, bf16
        dev.reserve("kv_cache", self.recipe.CONTEXT_LENGTH * kv_per_token)
        for i in range(c.n_layers):
            for e in range(self.recipe.KT_NUM_GPU_EXPERTS):  # static placement: "the first K"
                self.load_expert(i, e)

    def expert_w8(self, layer: int, e: int) -> tuple[W8, W8]:
        """Expert ``e`` converted from MXFP4 to W8A8 (exact; see :meth:`W8.from_mxfp4`)."""
        out = []
        for proj in ("gate_up", "down"):
            blocks, scales = self.ckpt.expert_codes(layer, proj)
            out.append(W8.from_mxfp4(mxfp4.unpack_consecutive(blocks[e]), scales[e]))
        return out[0], out[1]

    def load_expert(self, layer: int, e: int) -> None:
        """Make expert ``e`` of ``layer`` resident (device memory under ``hot_experts`` + H2D)."""
        if e in self.resident[layer]:
            return
        self.dev.place(HOT_TAG, self.expert_w8a8_bytes)
        self.resident[layer][e] = self.expert_w8(layer, e)

    def evict_expert(self, layer: int, e: int) -> None:
        """Drop expert ``e`` of ``layer`` from the device (it stays in the host pool)."""
        if self.resident[layer].pop(e, None) is not None:
            self.dev.free(HOT_TAG, self.expert_w8a8_bytes)

    def set_resident(self, hot: list[list[int]]) -> None:
        """Make ``hot[layer]`` the resident experts of every layer, never over the budget."""
        # TODO (step 4): make hot[layer] the resident set of every layer, whatever was resident
        # before (the previous request's hot set, not only the static first K). The card has no
        # room for two hot sets at once: mind the order of the swap (evict_expert / load_expert).
        raise NotImplementedError("step 4: set_resident")

    # -- the MoE layer -----------------------------------------------------------------------
    def route(self, layer: int, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.dev.linear_bf16(m, self.layers[layer]["router"], "router")
        probs = logits.softmax(-1)
        w, ids = probs.topk(self.cfg.top_k, dim=-1)
        self.dev.op("gating_top_k_softmax", 5 * probs.numel(), probs.numel() * 4)
        return w / w.sum(-1, keepdim=True), ids

    def is_resident(self, layer: int, ids: torch.Tensor) -> torch.Tensor:
        """Bool mask, same shape as ``ids``: which routed experts live on the device."""
        mask = torch.zeros(self.cfg.n_routed_experts, dtype=torch.bool)
        mask[list(self.resident[layer])] = True
        return mask[ids]

    def record(self, layer: int, ids: torch.Tensor, on_device: torch.Tensor) -> None:
        hits = self.slots[self.phase]
        hits[0] += int(on_device.sum())
        hits[1] += ids.numel()
        if self.phase == "prefill":
            self.routing.append((layer, ids.clone()))

    def device_part(
        self,
        layer: int,
        m: torch.Tensor,
        w: torch.Tensor,
        ids: torch.Tensor,
        on_device: torch.Tensor,
        out: torch.Tensor,
    ) -> torch.Tensor:
        """Add the resident experts' weighted outputs to ``out`` (computed on the device)."""
        for e in torch.unique(ids[on_device]).tolist():
            rows, col = ((ids == e) & on_device).nonzero(as_tuple=True)
            y = self.dev.swiglu_expert(m[rows], *self.resident[layer][e], "routed_expert")
            out = out.index_add(0, rows, y * w[rows, col, None])
        return out

    def cpu_part(
        self, layer: int, m: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, cold: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cold experts on the CPU: copy the activations of the rows that need them to the
        host, run each cold expert there, copy the weighted sum back. Returns (rows, sum [rows, D])."""
        # TODO (step 2): the CPU's share of the layer. Only activations cross the link (a token's
        # few hundred bytes, each way once), never expert weights; the CPU kernel
        # (self.cpu.expert) computes each cold expert for the tokens routed to it, and each
        # result counts with that token's routing weight. Tokens whose experts are all on the
        # card have nothing to do here.
        raise NotImplementedError("step 2: cpu_part")

    def moe(self, layer: int, m: torch.Tensor) -> torch.Tensor:
        """Routed + shared experts for ``m [n, D]`` with the hot/cold split."""
        w, ids = self.route(layer, m)
        on_device = self.is_resident(layer, ids)
        self.record(layer, ids, on_device)
        # TODO (step 2): the hot/cold split. Every routed slot runs where its expert lives: the
        # resident ones and the shared expert on the card (device_part, dev.swiglu_expert with
        # the layer's "shared" weights), the cold ones on the CPU (cpu_part); the layer's output
        # is their sum (account the combine on the card: dev.op("moe_combine", ...)).
        # TODO (step 3): with self.recipe.KT_SIDE_STREAM, the CPU part overlaps the card's own
        # experts on a side stream (self.s.stream / self.s.wait_stream). What you issue first,
        # and when the main stream may use the CPU result, decide whether the overlap is real.
        raise NotImplementedError("step 2: moe")

    # -- streaming prefill -------------------------------------------------------------------
    def use_streaming(self, n_tokens: int) -> bool:
        """Stream every expert through the device for this prefill? (``KT_PREFILL_STREAM``)"""
        # TODO (step 5): the recipe's switch and threshold (a prompt as long as the threshold streams).
        return False

    def stream_in(self, layer: int, group: list[int]) -> dict[int, tuple[W8, W8]]:
        """Copy a group of experts' MXFP4 bytes to a device staging buffer and convert them to
        W8A8 there ("depool"); the buffer holds both forms until :meth:`stream_out`."""
        n = len(group)
        self.dev.reserve(STREAM_TAG, n * (self.expert_mxfp4_bytes + self.expert_w8a8_bytes))
        self.s.account("h2d:expert_stream", flops=0.0, bytes=float(n * self.expert_mxfp4_bytes), engine="h2d")
        self.dev.op(
            "depool_mxfp4_to_w8a8",
            4 * n * self.expert_w8a8_bytes,
            n * (self.expert_mxfp4_bytes + self.expert_w8a8_bytes),
        )
        return {e: self.expert_w8(layer, e) for e in group}

    def stream_out(self) -> None:
        self.dev.free(STREAM_TAG)

    def moe_streaming(self, layer: int, m: torch.Tensor) -> torch.Tensor:
        """Prefill MoE with every routed expert computed on the device: resident ones in place,
        the others streamed in ``KT_PREFILL_STREAM_CHUNK`` experts at a time."""
        # TODO (step 5): every expert of the layer computes on the card. The resident ones are
        # there already; the recipe streams all the others (the whole layer, used by this prompt
        # or not: a fixed cost that does not grow with the prompt) through one staging buffer
        # of KT_PREFILL_STREAM_CHUNK experts (stream_in / stream_out), which must fit next to
        # the KV cache (plan.json). Name the streamed experts' ops "streamed_expert".
        raise NotImplementedError("step 5: moe_streaming")

    # -- the model -----------------------------------------------------------------------------
    def attention(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        c, L, dev = self.cfg, self.layers[layer], self.dev
        s = x.shape[0]
        pos = torch.arange(self.length, self.length + s)
        q = dev.linear_w8a8(x, L["wq"], "attn_q").view(s, c.n_heads, c.head_dim).transpose(0, 1)
        k = dev.linear_w8a8(x, L["wk"], "attn_k").view(s, c.n_kv_heads, c.head_dim).transpose(0, 1)
        v = dev.linear_w8a8(x, L["wv"], "attn_v").view(s, c.n_kv_heads, c.head_dim).transpose(0, 1)
        q, k = rope(q, pos, c.rope_theta), rope(k, pos, c.rope_theta)
        if self.length + s > self.recipe.CONTEXT_LENGTH:
            raise ValueError(
                f"context of {self.length + s} tokens > CONTEXT_LENGTH {self.recipe.CONTEXT_LENGTH}"
            )
        if self.kv[layer] is not None:
            k = torch.cat((self.kv[layer][0], k), dim=1)
            v = torch.cat((self.kv[layer][1], v), dim=1)
        self.kv[layer] = (k, v)
        t = k.shape[1]
        dev.op(
            "attention", 4 * c.n_heads * s * t * c.head_dim, 2 * t * c.head_dim * 2 + 2 * s * c.d_model * 2
        )
        return dev.linear_w8a8(attend(q, k, v, self.length), L["wo"], "attn_o")

    def norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        self.dev.op("rms_norm", 4 * x.numel(), x.numel() * 4)
        return rms_norm(x, w, self.cfg.rms_eps)

    def forward(self, ids: torch.Tensor, streaming: bool = False) -> torch.Tensor:
        c = self.cfg
        x = self.embed[ids]
        self.dev.op("embedding", 0, x.numel() * 2)
        for i, L in enumerate(self.layers):
            h = x + self.attention(i, self.norm(x, L["attn_norm"]))
            m = self.norm(h, L["ffn_norm"])
            x = h + (self.moe_streaming(i, m) if streaming else self.moe(i, m))
        self.length += ids.shape[0]
        return self.dev.linear_bf16(self.norm(x, self.ckpt["norm.weight"]), self.lm_head, "lm_head")[
            :, : c.vocab_size
        ]

    def prefill(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """A new request: fresh KV cache, prefill (streamed if long), then, with
        ``KT_DYNAMIC_RESIDENT``, this prompt's hot experts become the resident set for decode."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        self.kv: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * self.cfg.n_layers
        self.length = 0
        self.phase, self.routing = "prefill", []
        self.streamed_prefill = self.use_streaming(ids.shape[0])
        logits = self.forward(ids, streaming=self.streamed_prefill)
        if self.recipe.KT_DYNAMIC_RESIDENT:
            counts = residency.count_activations(self.routing, self.cfg.n_layers, self.cfg.n_routed_experts)
            hot = residency.choose_hot_set(counts, self.recipe.KT_NUM_GPU_EXPERTS)
            self.set_resident([[int(e) for e in row] for row in hot])
        self.phase = "decode"
        return logits

    def decode(self, token: int) -> torch.Tensor:
        return self.forward(torch.tensor([int(token)]))[0]

    def resident_sets(self) -> list[list[int]]:
        return [sorted(r) for r in self.resident]
