"""Where one verify pass's time goes, kernel by kernel (bench/gpu_speed.py `kernels`).

torch.profiler (CUDA and ROCm alike; on a CPU its CPU ops stand in for kernels) records passes
of R rows at a fixed context, after warm-up, each the body of the runtime's captured graph run
eagerly (the graph bucket's own closure: the ops the graph replays, launched one by one, so the
profiler sees who launched what): each kernel's name, launches a pass and device time. Views:

* regions: each linear layer (qkv, o, gate_up, down, lm_head), the attention, RMSNorm, RoPE and
  the KV-cache write are wrapped in `torch.profiler.record_function` for the profiled passes
  only (the runtime's own objects are wrapped and restored; nothing in the engine changes), so
  a kernel is attributed to the region that launched it, and a linear region's bytes are its
  weights' bytes (packed bytes for packed weights): achieved bandwidth per region.
* launches per layer: passes through the first layer only (`exit_layer` 1) are profiled too;
  (full - first) / (L - 1) is what a layer launches, on average over layers 2..L, whatever the
  forward looks like (a Q4_K_M file's layers differ: some hold Q6_K, whose kernels may split K
  differently, so a kernel's count a layer can be fractional).

The graph-replayed pass is profiled as well: its wall time, and where the profiler sees kernels
inside graph replays (CUPTI does on recent CUDA), their count and device time by kernel name.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from engine.model.device import synchronize
from engine.model.linear import Linear
from engine.model.runtime import chain

PREFIX = "spd:"
LINEARS = ("qkv", "o", "gate_up", "down")
MATMUL_HINTS = ("packed_mm", "gemm", "gemv", "matmul", "_mm", "mm_", "int4pack", "i8_", "cutlass",
                "nvjet", "xmma", "cijk", "dot", "linear", "addmm", "wmma", "mfma")


def _is_matmul(name: str) -> bool:
    n = name.lower()
    return any(h in n for h in MATMUL_HINTS)


class _Region:
    """A callable wrapped in a named profiler range."""

    def __init__(self, name: str, fn: Callable):
        self.name, self.fn = PREFIX + name, fn

    def __call__(self, *a, **k):
        with record_function(self.name):
            return self.fn(*a, **k)

    def __getattr__(self, item):           # Linear attributes (nbytes, parts...) pass through
        return getattr(self.fn, item)


def _set(owner, key, value, item) -> None:
    """owner[key] = value; a model's Layer is a frozen record of its weights (read by name too):
    the profiler swaps its fields for the duration and back."""
    if hasattr(owner, "__setitem__"):
        owner[key] = value
    else:
        object.__setattr__(owner, key, value)


@contextlib.contextmanager
def regions(rt, cache) -> Any:
    """Wrap the runtime's linears, attention, norms, RoPE and cache writes in named ranges for
    the duration; yields {region: bytes read a pass (weights), or None}."""
    m = rt.model
    saved: list[tuple[Any, str, Any, bool]] = []     # (owner, key, old, is_item)
    nbytes: dict[str, int | None] = {}

    def put(owner, key, name, item):
        old = owner[key] if item else getattr(owner, key)
        saved.append((owner, key, old, item))
        new = _Region(name, old)
        if item:
            _set(owner, key, new, item)
        else:
            setattr(owner, key, new)

    for L in m.layers:
        for key in LINEARS:
            if isinstance(L.get(key), Linear):
                nbytes[key] = nbytes.get(key, 0) + L[key].nbytes
                put(L, key, key, True)
    if isinstance(getattr(m, "lm_head", None), Linear):
        nbytes["lm_head"] = m.lm_head.nbytes
        put(m, "lm_head", "lm_head", False)
    for attr, name in (("_rms", "rmsnorm"), ("_rotate", "rope")):
        if callable(getattr(m, attr, None)):
            put(m, attr, name, False)
            nbytes[name] = None
    if callable(getattr(cache, "write", None)):
        put(cache, "write", "kv_write", False)
        nbytes["kv_write"] = None
    va = getattr(m, "verify_attention", None)
    if va is not None:
        saved.append((m, "verify_attention", va, False))
        m.verify_attention = lambda layout, _va=va: _Region("attention", _va(layout))
        nbytes["attention"] = None
    try:
        yield nbytes
    finally:
        for owner, key, old, item in reversed(saved):
            if item:
                _set(owner, key, old, item)
            elif key in vars(owner) and getattr(type(owner), key, None) is not None:
                delattr(owner, key)          # back to the class attribute (a method)
            else:
                setattr(owner, key, old)


def _walk(e) -> str | None:
    while e is not None:
        if e.name.startswith(PREFIX):
            return e.name[len(PREFIX):]
        e = e.cpu_parent
    return None


def _region_of(evt, frontend: dict, launches: dict) -> str:
    """The innermost spd: range around a CPU op, or around the launch of a device kernel: found
    through the op the profiler links the kernel to, else through the runtime launch call that
    shares the kernel's correlation id (Triton kernels are launched from Python, not by an op)."""
    if evt.device_type == DeviceType.CPU:
        return _walk(evt.cpu_parent) or "other"
    return (_walk(frontend.get(getattr(evt, "linked_correlation_id", -1)))
            or _walk(launches.get(evt.id)) or "other")


def kernel_events(prof) -> tuple[list[tuple[str, str, float]], str]:
    """[(kernel name, region, µs)] of every kernel the profiler saw, and which kind they are
    ("device": GPU kernels and copies; "cpu": CPU ops and their self time, without a GPU)."""
    evs = list(prof.events())
    dev = [e for e in evs if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False)
           and not e.name.startswith(PREFIX)]
    cpu = [e for e in evs if e.device_type == DeviceType.CPU]
    if dev:
        frontend = {e.id: e for e in cpu if getattr(e, "linked_correlation_id", 0) == 0}
        launches = {e.id: e for e in cpu if "launch" in e.name.lower()}
        return [(e.name, _region_of(e, frontend, launches), e.time_range.elapsed_us()) for e in dev], "device"
    # no device: every CPU op with its self time (its own, children excluded)
    ops = [e for e in cpu if not e.name.startswith(PREFIX) and not getattr(e, "is_user_annotation", False)]
    return [(e.name, _region_of(e, {}, {}), e.self_cpu_time_total) for e in ops], "cpu"


def _profiled(fn: Callable[[], Any], passes: int, device: torch.device):
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    with profile(activities=acts) as prof:
        for _ in range(passes):
            fn()
        synchronize(device)
    return prof


def _tally(events: list[tuple[str, str, float]], passes: int) -> dict:
    """{(name, region): [launches a pass, µs a pass]}."""
    out: dict[tuple[str, str], list[float]] = {}
    for name, region, us in events:
        row = out.setdefault((name, region), [0.0, 0.0])
        row[0] += 1 / passes
        row[1] += us / passes
    return out


def eager_body(ses, rows: int, exit_layer: int | None = None, at: int | None = None) -> None:
    """Run the body of the session's captured pass of `rows` rows eagerly, at length `at` (the
    committed length if None): the same ops, in the same order, that the graph replays (the
    graph bucket's own closure; its captured outputs are put back afterwards)."""
    g = ses._bucket(rows, exit_layer)
    saved = {k: getattr(g, k) for k in ("graph", "logits", "top_values", "top_ids") if hasattr(g, k)}
    g.graph = None                   # replay() then runs the closure instead of the graph
    try:
        g.replay([1] * rows, *chain(rows), ses.cache.length if at is None else at)
    finally:
        for k, v in saved.items():
            setattr(g, k, v)


def profile_pass(rt, rows: int = 1, context: int = 1000, passes: int = 5, warmup: int = 3,
                 named_regions: bool = True) -> dict:
    """The per-kernel table of a verify pass of `rows` rows at `context`, its graph's body run
    eagerly (see module doc). `named_regions` False: no wrapping (a torch.compile'd forward
    would recompile around the wrappers; it is never wrapped)."""
    n_layers = rt.config.n_layers
    first = 1 if n_layers > 1 else None     # the pass that stops after the first layer
    ses = rt.session(context + 64)

    def one(exit_layer=None):
        eager_body(ses, rows, exit_layer, context)

    # the fused forward (engine.model.fused_layer) reads the layers' weights directly: no
    # wrappers there, kernels are named by themselves
    named_regions = (named_regions and not getattr(rt, "compiled", False)
                     and getattr(rt.model, "fused", None) is None)
    out: dict = {"rows": rows, "context": context, "passes": passes, "n_layers": n_layers,
                 "device": rt.device_name, "weights": rt.weights_label, "named_regions": named_regions}
    with torch.inference_mode():
        for ex in (None, first):             # capture both graphs first (outside the ranges)
            ses._bucket(rows, ex)
        with regions(rt, ses.cache) if named_regions else contextlib.nullcontext({}) as region_bytes:
            for ex in (None, first):
                for _ in range(warmup):
                    one(ex)
            synchronize(rt.device)
            t0 = time.perf_counter()
            for _ in range(passes):
                one()
            synchronize(rt.device)
            out["eager_pass_ms"] = (time.perf_counter() - t0) * 1e3 / passes
            full, kind = kernel_events(_profiled(one, passes, rt.device))
            part = kernel_events(_profiled(lambda: one(first), passes, rt.device))[0] if first else []
    ses.close()
    out["kind"] = kind
    if "attention" in region_bytes:
        # an estimate: the keys and values of `context` positions, every layer, read once
        cfg = rt.config
        region_bytes["attention"] = (n_layers * 2 * cfg.n_kv_heads * context * cfg.head_dim
                                     * ses.cache.kv.element_size())
        out["attention_bytes_estimated"] = True
    tf, th = _tally(full, passes), _tally(part, passes)
    per_layer = n_layers - 1 if first else 1
    names: dict[str, list[float]] = {}
    table = []
    for (name, region), (n, us) in sorted(tf.items(), key=lambda kv: -kv[1][1]):
        hn, hus = th.get((name, region), (0.0, 0.0))
        table.append({"kernel": name, "region": region, "launches": n,
                      "per_layer": (n - hn) / per_layer, "us": us, "us_per_layer": (us - hus) / per_layer})
        agg = names.setdefault(name, [0.0, 0.0, 0.0])
        agg[0] += n
        agg[1] += (n - hn) / per_layer
        agg[2] += us
    # bytes: a linear region's weights go to its matmul kernel when the region has exactly one
    # matmul kernel name; the region table always carries them
    reg: dict[str, dict] = {}
    for r in table:
        g = reg.setdefault(r["region"], {"region": r["region"], "launches": 0.0, "per_layer": 0.0,
                                         "us": 0.0, "bytes": region_bytes.get(r["region"])})
        g["launches"] += r["launches"]
        g["per_layer"] += r["per_layer"]
        g["us"] += r["us"]
    for g in reg.values():
        g["gbs"] = g["bytes"] / g["us"] / 1e3 if g["bytes"] and g["us"] else None
        mm = [r for r in table if r["region"] == g["region"] and _is_matmul(r["kernel"])]
        if g["bytes"] and len({r["kernel"] for r in mm}) == 1:
            for r in mm:
                r["bytes"] = g["bytes"]
                r["gbs"] = g["bytes"] / r["us"] / 1e3 if r["us"] else None
    tot_n = sum(r["launches"] for r in table)
    tot_l = sum(r["per_layer"] for r in table)
    tot_us = sum(r["us"] for r in table)
    out.update(table=table, regions=sorted(reg.values(), key=lambda g: -g["us"]),
               by_kernel=[{"kernel": k, "launches": v[0], "per_layer": v[1], "us": v[2]}
                          for k, v in sorted(names.items(), key=lambda kv: -kv[1][2])],
               launches_per_pass=tot_n, launches_per_layer=tot_l,
               launches_outside_layers=tot_n - n_layers * tot_l, kernel_us_per_pass=tot_us)
    return out


def profile_graph_pass(rt, rows: int = 1, context: int = 1000, passes: int = 20) -> dict:
    """The graph-replayed pass: its wall ms (median) and, where the profiler sees inside graph
    replays, its kernel count and busy µs a pass. GPU only (None elsewhere)."""
    if not (rt.use_graphs and rt.device.type == "cuda"):
        return {}
    with torch.inference_mode():
        for _ in range(3):
            rt.time_verify_pass(rows, context)
        wall = statistics.median(rt.time_verify_pass(rows, context) for _ in range(passes))
        prof = _profiled(lambda: rt.time_verify_pass(rows, context), 5, rt.device)
    evs, kind = kernel_events(prof)
    kern = [e for e in evs if kind == "device" and not e[0].lower().startswith(("memcpy", "memset"))]
    names: dict[str, list[float]] = {}
    for name, _, us in kern:
        row = names.setdefault(name, [0.0, 0.0])
        row[0] += 1 / 5
        row[1] += us / 5
    return {"rows": rows, "context": context, "wall_ms": wall,
            "kernels_seen": len(kern) / 5, "kernel_us_per_pass": sum(e[2] for e in kern) / 5,
            "by_kernel": [{"kernel": k, "launches": v[0], "us": v[1]}
                          for k, v in sorted(names.items(), key=lambda kv: -kv[1][1])],
            "note": "" if kern else "(the profiler saw no kernels inside graph replays)"}


def _short(name: str, width: int = 58) -> str:
    name = " ".join(name.split())
    return name if len(name) <= width else name[:width - 3] + "..."


def format_profile(p: dict, top: int = 30) -> str:
    unit = "GPU kernels" if p.get("kind") == "device" else "CPU ops (no GPU here)"
    lines = [f"one eager pass: {p['rows']} row(s) at context {p['context']}, {p['device']}, {p['weights']}; "
             f"{unit}, {p['passes']} passes profiled",
             f"launches a pass {p['launches_per_pass']:.1f}, a layer {p['launches_per_layer']:.2f} "
             f"(x {p['n_layers']} layers), outside the layers {p['launches_outside_layers']:.1f}; "
             f"kernel time {p['kernel_us_per_pass'] / 1e3:.3f} ms a pass; eager wall {p['eager_pass_ms']:.3f} ms",
             "", f"{'kernel':<58} {'region':<9} {'/pass':>6} {'/layer':>6} {'µs':>9} {'MB':>8} {'GB/s':>7}"]
    for r in p["table"][:top]:
        mb = f"{r['bytes'] / 1e6:8.1f}" if r.get("bytes") else " " * 8
        gbs = f"{r['gbs']:7.0f}" if r.get("gbs") else " " * 7
        lines.append(f"{_short(r['kernel']):<58} {r['region']:<9} {r['launches']:>6.1f} {r['per_layer']:>6.2f} "
                     f"{r['us']:>9.1f} {mb} {gbs}")
    if len(p["table"]) > top:
        rest = p["table"][top:]
        lines.append(f"{'(' + str(len(rest)) + ' more)':<58} {'':<9} {sum(r['launches'] for r in rest):>6.1f} "
                     f"{sum(r['per_layer'] for r in rest):>6.2f} {sum(r['us'] for r in rest):>9.1f}")
    lines += ["", f"{'region':<10} {'/pass':>7} {'/layer':>7} {'µs':>9} {'MB':>9} {'GB/s':>7}"]
    for g in p["regions"]:
        mb = f"{g['bytes'] / 1e6:9.1f}" if g.get("bytes") else " " * 9
        gbs = f"{g['gbs']:7.0f}" if g.get("gbs") else " " * 7
        lines.append(f"{g['region']:<10} {g['launches']:>7.1f} {g['per_layer']:>7.2f} {g['us']:>9.1f} {mb} {gbs}")
    return "\n".join(lines)
