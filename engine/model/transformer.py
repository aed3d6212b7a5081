"""The transformer forward: Llama / Qwen2 / Qwen3 in plain torch.

`forward(tokens, positions, mask, cache, slots)`: the R rows of one call may form a tree. Each
row has its own position and an explicit boolean mask over the cache's first `span` slots (the
committed prefix and this window's rows). Row r's keys and values are written to cache slot
slots[r] before attention, so a row can attend to itself and its ancestors in the same call.
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import torch.nn.functional as F

from engine.kernels.pass_launch import pass_launches, wants_pdl
from engine.model.attention import WindowLayout, bind_layout_attention, gqa_bias, sdpa_gqa
from engine.model.cache import KVCache
from engine.model.linear import Linear, check_cpu_kernels, cpu_fast_available
from engine.model.source import TensorSource
from engine.weights import (CPU_FAST_TYPES, CpuInt8Blocks, PackedWeight, dequantize_packed,
                            native_q4_k, prepare_cpu_q8, qtype_of, widen_q6_k)
from engine.model.config import ModelConfig
from engine.model.fused_layer import fused_forward_for
from engine.model.layer import Layer
from engine.model.rope import rope_tables


def _verify_attention(device: torch.device) -> Callable | None:
    """The layout-invariant attention for verify passes on this device, or None (SDPA): a
    function of a pass's WindowLayout giving that pass's `attend(q, k, v)`."""
    if device.type == "cuda":
        try:
            from engine.kernels.triton_attention import bind_layout_attention_triton
        except ImportError:          # no Triton: SDPA, exact to ~1e-6 but not bit for bit
            return None
        return bind_layout_attention_triton
    # the CPU, every dtype and kernel choice: the torch implementation (float32 arithmetic on
    # every x86 CPU: engine.model.attention.float32_bmm), the linear layers through fixed-shape
    # products (engine.weights.invariant_dense): lossless in float32 and bfloat16 alike
    return bind_layout_attention


def widen_q6k_default(device: torch.device) -> bool:
    """Whether Q6_K weights are widened to int8 at load (engine.weights.packed, Q6_K8: the same
    values, 8.56 bits a weight instead of 6.56). On CUDA, yes: the packed kernel is latency-
    bound there and runs a Q6_K8 weight 1.2-1.3x faster than the Q6_K (H200, BENCHMARKS.md,
    "Q6_K widened"). On ROCm, no: on RDNA's 0.6-1 TB/s the weight stream binds, and 30% more
    bytes would cost more than the 6-bit merge saves (not measured on a card). SPECSCOPE_Q6K_INT8
    = 1 / 0 forces either way."""
    env = os.environ.get("SPECSCOPE_Q6K_INT8", "")
    if env in ("0", "1"):
        return env == "1" and device.type == "cuda"
    return device.type == "cuda" and torch.version.hip is None


def native_q4k_default(device: torch.device) -> bool:
    """Whether Q4_K weights are kept in GGUF's own block order on the GPU (Q4_KN,
    engine.weights.packed.native_q4_k: the same values and, by construction, the same matmul
    bits; every load of the kernel's tile is a wide aligned one). Off unless
    SPECSCOPE_Q4K_NATIVE=1 (on a GPU only): measured slower than Q4_K's planes on the H200
    (bench/q4k_native_ab.py; BENCHMARKS.md, "The packed matmul, third round")."""
    return os.environ.get("SPECSCOPE_Q4K_NATIVE", "") == "1" and device.type == "cuda"


class _Placer:
    """Builds a model's weights on its device one at a time, in the order they were always
    read, calling `progress` about every hundredth weight."""

    def __init__(self, weights: dict[str, TensorSource], n_weights: int, device: torch.device,
                 dtype: torch.dtype, packed: bool, progress: Callable[[str, float], None] | None):
        self.weights, self.n_weights, self.device, self.dtype = weights, n_weights, device, dtype
        self.packed, self.progress = packed, progress
        self.done = 0
        self.every = max(1, n_weights // 100)
        self.widen = widen_q6k_default(device)
        self.native_q4k = native_q4k_default(device)

    def _step(self) -> None:
        self.done += 1
        if self.progress is not None and self.done % self.every == 0:
            self.progress("placing weights on the device", self.done / self.n_weights)

    def dense(self, name: str) -> torch.Tensor:
        t = self.weights[name].dense(self.device, self.dtype)
        self._step()
        return t

    def linear(self, name: str) -> torch.Tensor | PackedWeight:
        src = self.weights[name]
        if self.packed and src.packable:
            self._step()
            pw = src.packed(self.device)
            # Q6_K quants widened to int8 where that is faster (widen_q6k_default)
            if self.native_q4k and pw.qtype == "Q4_K":
                return native_q4_k(pw)            # GGUF's block order (native_q4k_default)
            return widen_q6_k(pw) if self.widen and pw.qtype == "Q6_K" else pw
        return self.dense(name)

    def layer(self, cfg: ModelConfig, i: int, kern: str) -> Layer:
        w, lin, p = self.dense, self.linear, f"layers.{i}."
        # built in the order the weights were always read (the progress callback counts them)
        attn_norm = w(p + "attn_norm")
        bias = torch.cat([w(p + "q_bias"), w(p + "k_bias"), w(p + "v_bias")]) if cfg.qkv_bias else None
        # q, k, v fused: [(Hq + 2 Hkv) * D, H]
        qkv = Linear([lin(p + "q"), lin(p + "k"), lin(p + "v")], bias, kern)
        q_norm, k_norm = (w(p + "q_norm"), w(p + "k_norm")) if cfg.qk_norm else (None, None)
        o = Linear([lin(p + "o")], cpu_kernels=kern)
        mlp_norm = w(p + "mlp_norm")
        # gate and up fused: [2 I, H]
        gate_up = Linear([lin(p + "gate"), lin(p + "up")], cpu_kernels=kern)
        down = Linear([lin(p + "down")], cpu_kernels=kern)
        return Layer(attn_norm, qkv, o, mlp_norm, gate_up, down, q_norm, k_norm)


class Transformer:
    """Holds the weights (fused where it saves passes over memory) and the RoPE tables.

    `weights` maps canonical names to TensorSources; each is built on the device in its final
    form, one at a time. With `packed`, linear weights stored in a packed quantization
    (engine.weights.PACKED_TYPES) stay in it and are multiplied by engine.weights' kernels;
    everything else (norms, embeddings, other types) is dequantized to `dtype`. On the CPU,
    `cpu_kernels` picks the packed kernels (engine.model.linear): "fast" (4-bit types on torch's
    int4 matmul with bfloat16 activations, the LM head in bfloat16, row-invariant attention:
    engine.model.attention) or "exact" (float32 throughout).
    """

    def __init__(self, cfg: ModelConfig, weights: dict[str, TensorSource],
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 packed: bool = False, progress: Callable[[str, float], None] | None = None,
                 cpu_kernels: str = "fast"):
        check_cpu_kernels(cpu_kernels)
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = dtype
        names = [n for n in weights if not (cfg.tie_embeddings and n == "lm_head")]
        self.file_types = sorted({weights[n].qtype for n in names})
        place = _Placer(weights, len(names), self.device, dtype, packed, progress)
        kern = cpu_kernels if self.device.type == "cpu" and cpu_fast_available() else "exact"
        self.embed = place.dense("embed")                         # [V, H]
        head = self.embed if cfg.tie_embeddings else place.linear("lm_head")
        self.norm = place.dense("norm")
        self.layers: list[Layer] = [place.layer(cfg, i, kern) for i in range(cfg.n_layers)]
        if self.cpu_fast:
            src = weights["embed" if cfg.tie_embeddings else "lm_head"]
            q8 = (head if isinstance(head, PackedWeight) else
                  src.packed(self.device) if src.packable and qtype_of(src.qtype).name == "Q8_0" else None)
            head = self._fast_head(head, q8)
        self.lm_head = Linear([head], cpu_kernels=kern)
        # Verify passes attend through layout-invariant attention (engine.model.attention) where
        # the rest of the model is row-invariant too, so a window row equals the one-row decode
        # step bit for bit: on a GPU with Triton (every linear kernel there is row-invariant),
        # and on the CPU in every dtype. Only a GPU without Triton falls back to SDPA with a
        # mask: exact to ~1e-6, not bit for bit (its near ties are flagged: runtime.TIE_MARGINS).
        self.verify_attention = _verify_attention(self.device)
        self.cos, self.sin = rope_tables(cfg, self.device, dtype, length=2048)   # [C, D] each, scaled
        self._retired_rope: list[tuple[torch.Tensor, torch.Tensor]] = []         # (_grow_rope)
        # a packed model on a GPU runs the fused layer (engine.model.fused_layer): ~9 launches
        # a layer instead of ~25, the same contract, rows still bit-identical across passes
        self.fused = fused_forward_for(self)
        # whether its passes launch with programmatic dependent launch (CUDA, compute
        # capability 9+; engine.kernels.pass_launch: a model of small layer matrices gains)
        self.pdl = wants_pdl(max((v.nbytes for L in self.layers for v in L.linears()), default=0))

    @property
    def cpu_fast(self) -> bool:
        """Whether any layer runs on the fast CPU kernels (engine.weights.cpu_fast)."""
        return any("cpu_fast" in v.kernels for L in self.layers for v in L.linears())

    def _fast_head(self, head: torch.Tensor | PackedWeight, packed: PackedWeight | None
                   ) -> torch.Tensor | PackedWeight | CpuInt8Blocks:
        """The LM head of a CPU-fast model (`packed`: the file's head, or the tied embedding,
        packed, where its type packs): its rows are read once per pass (113 MB as float32 for
        the bundled model's vocabulary, more than its 4-bit layers). A 4-bit head goes to the
        int4 kernels; a Q8_0 one to int8 blocks (engine.weights.cpu_fast.CpuInt8Blocks: 28 MB,
        row-invariant on any CPU, with a per-row int8 screen: 28 MB more, so that a greedy pass
        finds each row's top 5 without all the blocks, `Linear.top`); anything else to a
        bfloat16 copy (half the float32 bytes, at the precision the int4 layers already have),
        multiplied in fixed 8-row blocks in a verify pass (engine.weights.invariant_dense). The
        embedding lookup keeps `embed`."""
        if packed is not None and packed.qtype == "Q8_0":
            return prepare_cpu_q8(packed, screen=True)
        if isinstance(head, PackedWeight):
            if head.qtype in CPU_FAST_TYPES:
                return head
            return dequantize_packed(head).to(torch.bfloat16)
        return head.to(torch.bfloat16) if head.dtype == torch.float32 else head

    def weights_summary(self) -> dict:
        """Bytes of every weight on the device, and the storage types of the weights in use."""
        seen: dict[int, int] = {}
        packed_types: set[str] = set()
        file_types: set[str] = set(self.file_types)

        def add(t: torch.Tensor | None) -> None:
            if t is not None:
                seen[t.data_ptr()] = t.numel() * t.element_size()

        add(self.embed)
        add(self.norm)
        for v in [x for L in self.layers for x in L.values()] + [self.lm_head]:
            if isinstance(v, Linear):
                packed_types |= v.packed_types
                for t in v.tensors():
                    add(t)
            else:
                add(v)
        return {"bytes": sum(seen.values()), "packed_types": sorted(packed_types),
                "file_types": sorted(file_types)}

    @property
    def needs_mask(self) -> bool:
        """Whether a verify pass needs the [R, S] mask (no layout-invariant attention here)."""
        return self.verify_attention is None

    def new_cache(self, capacity: int) -> KVCache:
        capacity = min(capacity, self.cfg.max_context)
        if capacity > self.cos.shape[0]:   # RoPE tables cover the cache, not the model's whole context
            self._grow_rope(capacity)
        return KVCache(self.cfg, capacity, self.device, self.dtype)

    def _grow_rope(self, length: int) -> None:
        """Longer RoPE tables whose first rows are the old ones, bit for bit; the old tables stay
        alive. A graph captured on another session reads the tables it was captured with by
        address: freed, their memory went to other tensors and that session's next replay saw
        other positions (a runtime that had decoded a long prompt gave other tokens than a
        fresh one, issue 31)."""
        cos, sin = rope_tables(self.cfg, self.device, self.dtype, length=length)
        L = self.cos.shape[0]
        cos[:L], sin[:L] = self.cos, self.sin
        self._retired_rope.append((self.cos, self.sin))
        self.cos, self.sin = cos, sin

    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # one fused kernel where torch has one (it accumulates in float32 for half types)
        return F.rms_norm(x, x.shape[-1:], weight, eps=self.cfg.rms_eps)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # x: [R, H, D]; cos/sin: [R, 1, D] (rotate_half convention)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def _layer(self, i: int, L: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               cache: KVCache, slots: torch.Tensor, attend: Callable | None, bias: torch.Tensor | None,
               inv: bool) -> torch.Tensor:
        """Layer i of the eager forward: x [R, H] in, x [R, H] out; writes its keys and values."""
        cfg = self.cfg
        R = x.shape[0]
        Hq, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        h = self._rms(x, L.attn_norm)
        qkv = L.qkv(h, invariant=inv)                               # [R, (Hq+2Hkv)D]
        qk = qkv[:, :(Hq + Hkv) * D].view(R, Hq + Hkv, D)
        v = qkv[:, (Hq + Hkv) * D:].view(R, Hkv, D)
        if cfg.qk_norm:
            qk = torch.cat([self._rms(qk[:, :Hq], L.q_norm),
                            self._rms(qk[:, Hq:], L.k_norm)], dim=1)
        qk = self._rotate(qk, cos, sin)                       # [R, Hq+Hkv, D]
        k = qk[:, Hq:].transpose(0, 1)                        # [Hkv, R, D]
        cache.write(i, k, v.transpose(0, 1), slots)
        if attend is not None:
            kc, vc = cache.kv[i, 0], cache.kv[i, 1]           # [Hkv, C, D]
            a = attend(qk[:, :Hq], kc, vc).to(x.dtype).reshape(R, Hq * D)
        else:
            a = sdpa_gqa(qk[:, :Hq], cache, i, bias)
        x = L.o(a, residual=x, invariant=inv)                       # x + a @ o^T
        h = self._rms(x, L.mlp_norm)
        gate, up = L.gate_up(h, invariant=inv).chunk(2, dim=-1)
        x = L.down(F.silu(gate) * up, residual=x, invariant=inv)
        return x

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache, slots: torch.Tensor, last_only: bool = False,
                layout: WindowLayout | None = None, exit_layer: int | None = None,
                top: int = 0) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tokens, positions, slots: [R] long; mask: [R, S] bool (True = attend) over cache slots
        [0, S). Returns logits [R, V] (or [1, V] for the last row when last_only).

        `top` k > 0: where the LM head can give each row's top k without all the logits (a
        screened Q8_0 head on the fast CPU path: Linear.top), return (values float32 [R, k],
        ids [R, k]) instead, the values bit for bit those of the logits; else the logits.

        A verify pass also gives its `layout` (the committed length, each row's depth and its
        ancestors): with it, attention runs on `verify_attention` when the model has one, and
        `mask` may be None (see `needs_mask`).

        `exit_layer` K: run only the first K layers, then the final norm and LM head (an early-exit
        draft; only those layers' cache slots are written).

        On a GPU every kernel launch costs microseconds whatever its size, and a decode pass of a
        small model is almost all launches, so the layer is written to launch few: fused RMSNorm,
        one RoPE over q and k together, residual adds folded into addmm, no key copies for GQA.
        """
        if self.fused is not None:
            with pass_launches(self.pdl):
                return self.fused.forward(tokens, positions, mask, cache, slots, last_only,
                                          layout, exit_layer)
        if getattr(self.layers[0].gate_up, "swiglu_block", None):
            raise RuntimeError("this model's gate|up rows are interleaved for the fused forward")
        G = self.cfg.n_heads // self.cfg.n_kv_heads
        x = F.embedding(tokens, self.embed)                       # [R, H]
        cos = self.cos[positions].unsqueeze(1)                    # [R, 1, D]
        sin = self.sin[positions].unsqueeze(1)
        # layout-invariant attention where rows' logits are compared across passes (verify); a
        # prefill (last_only) only fills the cache, the same way for every decoder: fast SDPA
        attend = (self.verify_attention(layout)
                  if self.verify_attention is not None and layout is not None and not last_only
                  else None)
        inv = attend is not None     # the linear layers too: row-invariant kernels (linear.py)
        bias = gqa_bias(mask, G, x.dtype) if attend is None else None
        for i, L in enumerate(self.layers[:exit_layer]):
            x = self._layer(i, L, x, cos, sin, cache, slots, attend, bias, inv)
        if last_only:
            x = x[-1:]
        h = self._rms(x, self.norm)
        found = self.lm_head.top(h, top) if top else None
        return found if found is not None else self.lm_head(h, invariant=inv).float()
