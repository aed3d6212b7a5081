"""A loaded model on a device, and its sessions: prefill, one verify pass over a window of rows,
commit, scratch passes, timing.

`Runtime` holds the weights; a `Session` (`Runtime.session(capacity)`) is one stream of tokens
with its own KV cache and captured graphs: the decoder, each side of a race and a draft model
each hold one, and the early-exit drafter sees the target's session through its first K layers
(`Session.first_layers`).

On CPU the forward runs eagerly with attention over exactly the committed prefix plus the
window. On a GPU (CUDA or ROCm) each verify pass replays a captured graph: eager PyTorch spends
most of a pass on kernel launches, a replayed graph a fraction of that (BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"). Graphs are
captured once per row-count bucket at a fixed cache capacity; a window pads its rows up to the
bucket (padded rows write scratch slots past the window and are ignored): engine.model.graphs.

Exactness: a verify pass runs layout-invariant attention and row-invariant linear kernels where
the device has them (Triton on a GPU, the fast kernels on the CPU: Transformer.verify_attention),
so each row's logits equal, bit for bit, those of the one-row pass that plain decoding runs for
the same token, in bfloat16 too: greedy speculation reproduces plain greedy decoding exactly.
`exact_rows` says whether this runtime has that guarantee.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from engine.kernels.window_layout import WindowLayout, ancestor_table
from engine.model.cache import KVCache
from engine.model.device import (device_name, dtype_name, one_torch_thread, pick_device, pick_dtype,
                                 synchronize)
from engine.errors import ParameterError
from engine.limits import MAX_ROWS
from engine.model.graphs import TOPK, GraphBucket, PrefillBucket, top_k
from engine.model.row_scores import RowScores, head_top, read_step, summarize, top_scores
from engine.model.row_scores import top_lower_id  # noqa: F401  (re-exported: tests, callers)
from engine.model.plain_queue import PlainQueue, Step
from engine.model.linear import check_cpu_kernels, cpu_fast_available
from engine.model.transformer import Transformer
from engine.weights import CPU_FAST_TYPES

if TYPE_CHECKING:                   # the runtime is handed a loaded model; it never opens files
    from engine.io.load import LoadedModel

GRAPH_BUCKETS = (1, 2, 4, 8, 16, 32, MAX_ROWS)
# top-2 logit margins below which a row of a runtime without exact rows is a near tie: the
# largest row-vs-alone logit differences measured with SDPA and cuBLAS, rounded up
# (BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)"); float16 taken at bfloat16's / 8, its mantissa's 3 more bits
TIE_MARGINS = {"float32": 1e-4, "bfloat16": 0.6, "float16": 0.08}
PREFILL_CHUNK = 512
# prefill chunks are padded up to one of these row counts and replayed from a graph (CUDA),
# keys over the first S slots, S a power of two >= the chunk's end: a prompt's launches cost
# one replay instead of ~20 Python launches a layer (eager, the bundled model's prefill was
# host-bound). Below DENSE_PREFILL_ROWS (32) a chunk pads to 31 at most: padding must not
# switch a short chunk to the dequantize-then-GEMM route, slower there than packed at that size
# (BENCHMARKS.md, "Engine model and kernel timings (moved from code comments)")
PREFILL_BUCKETS = (16, 31, 64, 128, 256, PREFILL_CHUNK)


def chain(n: int) -> tuple[list[int], torch.Tensor]:
    """(depths [n], ancestors [n, n] bool) of a window that is a plain run of n tokens, row i the
    child of row i - 1: what `Runtime.verify` takes for a probe pass or a reference forward.
    A draft tree's arrays come from the tree itself (engine.speculation.tree.TokenTree)."""
    return list(range(n)), torch.ones(n, n, dtype=torch.bool).tril()


WEIGHT_MODES = ("auto", "packed", "dequantized")
PACKED_MARK = "[packed]"    # appended to a packed runtime's model id: cost profiles are per form


def cpu_fast_fits(loaded: "LoadedModel") -> bool:
    """Whether `weights="auto"` packs this model on this CPU: every packable linear weight has an
    int4 CPU layout (engine.weights.cpu_fast) and the CPU has AVX-512, the only kind measured
    faster than float32 BLAS (on AVX2 the int4 kernel barely beats a float32 GEMV)."""
    types = {s.qtype for name, s in loaded.weights.items()
             if s.packable and name not in ("embed", "lm_head")}
    return (bool(types) and types <= set(CPU_FAST_TYPES) and cpu_fast_available()
            and torch.backends.cpu.get_cpu_capability().startswith("AVX512"))


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _weights_form(loaded: "LoadedModel", device: torch.device, dtype: str, weights: str,
                  cpu_kernels: str) -> tuple[bool, str]:
    """(packed, cpu_kernels): whether the weights stay packed, and the CPU kernels they take."""
    # auto: packed on a GPU, where a pass streams the weights and 4-bit weights stream ~4x
    # faster than 16-bit ones. On a CPU with AVX-512, packed when the fast int4 kernels take
    # every linear weight of the file (Q4_0/Q4_1/Q4_K): decode measured ~2x float32's here
    # (BENCHMARKS.md, "CPU: packed weights"); otherwise dequantized float weights (BLAS).
    # The int4 kernels compute in bfloat16: auto takes them only when the dtype is auto
    # too, and an explicit float32 / float16 never gets them (its arithmetic is honoured)
    if dtype not in ("auto", "bfloat16"):
        cpu_kernels = "exact"
    packed = weights == "packed" or (weights == "auto" and (
        device.type != "cpu" or (cpu_kernels == "fast" and dtype == "auto" and cpu_fast_fits(loaded))))
    return packed, cpu_kernels


class Runtime:
    def __init__(self, loaded: "LoadedModel", device: str = "auto", dtype: str = "auto",
                 capacity: int | None = None, graphs: bool | None = None,
                 compile: bool | None = None, weights: str = "auto",
                 progress: Callable[[str, float], None] | None = None, cpu_kernels: str = "fast"):
        if weights not in WEIGHT_MODES:
            raise ParameterError(f"--weights must be one of {', '.join(WEIGHT_MODES)}, got {weights!r}")
        check_cpu_kernels(cpu_kernels)
        self.loaded = loaded
        self.config = loaded.config
        self.tokenizer = loaded.tokenizer
        self.device = pick_device(device)
        self.dtype = pick_dtype(dtype, self.device)
        self.dtype_name = dtype_name(self.dtype)
        self.device_name = device_name(self.device)
        packed, cpu_kernels = _weights_form(loaded, self.device, dtype, weights, cpu_kernels)
        self.dtype_request = dtype          # "auto" or a dtype name: a draft model opens with it
        # what a cost profile is measured for: the model file and the form of its weights
        self.model_id = loaded.source.name
        t0 = time.perf_counter()
        with one_torch_thread() if self.device.type == "cpu" else contextlib.nullcontext():
            self.model = Transformer(self.config, loaded.weights, self.device, self.dtype,
                                     packed=packed, progress=progress, cpu_kernels=cpu_kernels)
        synchronize(self.device)
        self.load_s = loaded.load_s + time.perf_counter() - t0
        self._describe_weights()
        # whether every verify row equals the one-row pass bit for bit (module doc); where it
        # does not, a greedy row whose top-2 margin is within the dtype's rounding noise may
        # pick another token than plain decoding would: such rows are flagged as near ties
        self.exact_rows = self.model.verify_attention is not None
        self.tie_margin = 0.0 if self.exact_rows else TIE_MARGINS.get(self.dtype_name, 1e-4)
        self._set_up_passes(graphs, compile)
        # the capacity a new session starts at (a session grows past it only when a request
        # needs more); sessions handed back (`Session.close`) wait here for the next request
        # with their captured graphs, so a run does not capture them again
        self.default_capacity = capacity or min(self.config.max_context, 2048)
        self._idle: list[Session] = []

    def _describe_weights(self) -> None:
        """The loaded weights in words and bytes: activation_dtype, weight_bytes, weights_mode,
        weights_label, and the packed mark on model_id."""
        summary = self.model.weights_summary()
        # what the linear layers multiply in: bfloat16 on the fast CPU kernels (int4 weights,
        # bfloat16 activations, a bfloat16 LM head), else the model's dtype
        self.activation_dtype = "bfloat16" if self.model.cpu_fast else self.dtype_name
        self.weight_bytes = summary["bytes"]
        self.weights_mode = "packed" if summary["packed_types"] else "dequantized"
        fmt = self.loaded.file_type or "+".join(summary["file_types"])
        where = "in memory" if self.device.type == "cpu" else "on the card"
        if self.weights_mode == "packed":
            self.model_id += f" {PACKED_MARK}"
            self.weights_label = f"{fmt} packed, {_gb(self.weight_bytes)} {where}"
        else:
            self.weights_label = f"{fmt} as {self.dtype_name}, {_gb(self.weight_bytes)} {where}"

    def _set_up_passes(self, graphs: bool | None, compile: bool | None) -> None:
        """Whether passes replay captured graphs and run compiled, and the graphs' memory pools."""
        self.use_graphs = (self.device.type == "cuda") if graphs is None else graphs
        # torch.compile inside the graphs fuses the ~25 small kernels of each layer (GPU only;
        # SPECSCOPE_COMPILE=1 opts in: the first compile costs tens of seconds, later runs hit
        # inductor's on-disk cache)
        if compile is None:
            compile = os.environ.get("SPECSCOPE_COMPILE", "0") == "1"
        self.compiled = bool(compile and self.use_graphs and self.device.type == "cuda")
        self.forward_fn = (torch.compile(self.model.forward, dynamic=False)
                           if self.compiled else self.model.forward)
        self._pool = (torch.cuda.graph_pool_handle()
                      if self.use_graphs and self.device.type == "cuda" else None)
        # the prefill graphs' own pool: they keep no outputs, so their scratch is shared among
        # them only (never with a verify graph's logits)
        self._prefill_pool = (torch.cuda.graph_pool_handle()
                              if self.use_graphs and self.device.type == "cuda" else None)

    # -- sessions ------------------------------------------------------------------------
    def session(self, capacity: int, spare: int = 0) -> "Session":
        """A stream with room for `capacity` committed tokens (prompt + new tokens), plus up to
        `spare` window rows where the context allows (a window never takes more rows than are
        free). An idle session is reused (its graphs stay captured) or a new one is made."""
        s = self._idle.pop() if self._idle else Session(self, self.default_capacity)
        s.reserve(capacity, spare)
        return s

    def _release(self, session: "Session") -> None:
        if session not in self._idle:
            self._idle.append(session)

    def time_verify_pass(self, n_rows: int, context: int, exit_layer: int | None = None) -> float:
        """Milliseconds of one verify pass of n_rows (a chain) at `context` committed tokens, on
        an idle session (Session.time_verify_pass); what a probe before any run times."""
        s = self._idle.pop() if self._idle else Session(self, self.default_capacity)
        try:
            return s.time_verify_pass(n_rows, context, exit_layer)
        finally:
            s.close()

    # Triton compiles a kernel once per specialization: the row count's 16-row slices (1-4)
    # and whether it is 1 or a multiple of 16. The graph buckets (powers of two) cover five of
    # the eight; prefill chunks of other lengths would compile the rest in the middle of a
    # timed run (seconds each, the first time on a machine; Triton's disk cache after that).
    _PREFILL_ROW_CLASSES = (19, 35, 48, 51)

    def _warm_prefill_kernels(self, cache: KVCache) -> None:
        C = cache.capacity
        for R in self._PREFILL_ROW_CLASSES:
            if R > C // 2:
                break
            slots = torch.arange(C - R, C, device=self.device)   # scratch slots at the end
            mask = torch.zeros(R, C, dtype=torch.bool, device=self.device)
            mask[:, C - R:] = torch.tril(torch.ones(R, R, dtype=torch.bool, device=self.device))
            tokens = torch.zeros(R, dtype=torch.long, device=self.device)
            self.model.forward(tokens, torch.arange(R, device=self.device), mask, cache, slots,
                               last_only=True)
        synchronize(self.device)


class Session:
    """One stream of tokens on a runtime: its own KV cache and the graph buckets captured on it
    (graphs hold their cache's addresses). The decoder, each side of a race and a draft model
    each hold one; `Runtime.session` makes or reuses one, `close` hands it back.

    Passes: `prefill` (committed tokens), `verify` (a window at the committed length), `commit`
    (keep a window's accepted rows), `scratch` (a pass at any length >= the committed one that
    writes only slots past it and commits nothing: draft passes, timing passes). It is a stream
    in engine.speculation.stream's sense (as is `first_layers`' view); which device, model and
    dtype it runs is its `runtime`'s to say.
    """

    def __init__(self, rt: Runtime, capacity: int) -> None:
        self.runtime = rt
        self.cache: KVCache = self._new_cache(capacity)
        self._buckets: dict[tuple[int, int | None], GraphBucket] = {}   # (rows, exit layer)
        self._prefills: dict[tuple[int, int], PrefillBucket] = {}        # (rows, span)
        self.plain_queue = PlainQueue()      # a plain step queued on the device (verify's ahead)
        self.needed = 0            # what the current request asked for (reserve)
        self.spare = 0
        self.request_capacity = capacity

    # -- the cache -----------------------------------------------------------------------
    def reserve(self, needed: int, spare: int = 0) -> None:
        """An empty stream with room for `needed` tokens plus up to `spare` window rows where
        the context allows; the cache grows (and its graphs are dropped) only if it must."""
        rt = self.runtime
        if needed > rt.config.max_context:
            raise ParameterError(
                f"the prompt plus --max-new-tokens needs {needed} tokens, more than the model's "
                f"context of {rt.config.max_context}: shorten the prompt or lower --max-new-tokens"
            )
        self.plain_queue.drop()
        self.needed, self.spare = needed, spare
        size = min(rt.config.max_context, needed + spare)
        # the capacity a fresh session would have for this request: what decisions that
        # shape a pass are made against, so a reused (larger) cache computes the same bits
        fresh = min(rt.config.max_context, rt.default_capacity)
        self.request_capacity = (fresh if size <= fresh else
                                 min(rt.config.max_context, 1 << (size - 1).bit_length()))
        if size > self.cache.capacity:
            cap = min(rt.config.max_context, 1 << (size - 1).bit_length())
            self._buckets.clear()      # graphs hold the old cache's addresses
            self._prefills.clear()
            del self.cache             # free the old one before the new one is allocated
            self.cache = self._new_cache(cap)
        self.cache.reset()

    def _new_cache(self, capacity: int) -> KVCache:
        # a normal tensor even when a probe (inside inference mode) makes the session: a later
        # request commits into it outside inference mode
        with torch.inference_mode(False):
            return self.runtime.model.new_cache(capacity)

    @property
    def capacity(self) -> int:
        return self.cache.capacity

    @property
    def length(self) -> int:
        """Committed tokens."""
        return self.cache.length

    def room(self) -> int:
        """Slots free past the committed prefix."""
        return self.cache.room()

    def window_room(self) -> int:
        """The most rows a window may have now: the cache's free slots (with graphs, the largest
        bucket that fits, as a window is padded up to its bucket)."""
        room = self.cache.room()
        if self.runtime.use_graphs:
            return max((b for b in GRAPH_BUCKETS if b <= room), default=0)
        return room

    def commit(self, accepted_rows: list[int]) -> None:
        """Keep the window rows `accepted_rows` as the next committed tokens (KVCache.commit)."""
        self.cache.commit(accepted_rows)

    def advance(self, n: int) -> None:
        """n more tokens past the committed prefix already hold the right keys: commit them."""
        self.plain_queue.drop()
        self.cache.advance(n)

    def truncate(self, length: int) -> None:
        self.plain_queue.drop()
        self.cache.truncate(length)

    def close(self) -> None:
        """Hand the session back to its runtime for a later request (its graphs stay)."""
        self.cache.reset()
        self.runtime._release(self)

    def first_layers(self, k: int) -> "LayerView":
        """A view of this stream through the model's first k layers (an early-exit draft)."""
        return LayerView(self, k)

    def warm_up(self, exit_layer: int | None = None) -> None:
        """Capture every graph bucket now (GPU), so no window pays for a capture; with packed
        weights also compile the Triton kernels for the row counts prefill uses. `exit_layer`:
        the buckets of that early-exit draft pass instead of the full model's."""
        rt = self.runtime
        if rt.use_graphs and rt.device.type == "cuda":
            with torch.inference_mode():
                for b in GRAPH_BUCKETS:
                    if b <= self.cache.capacity // 2:
                        self._bucket(b, exit_layer)
                if rt.weights_mode == "packed" and exit_layer is None:
                    rt._warm_prefill_kernels(self.cache)

    # -- passes ------------------------------------------------------------------------
    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> None:
        """Write `ids` into the cache as committed tokens (no logits needed)."""
        rt, cache = self.runtime, self.cache
        self.plain_queue.drop()
        for start in range(0, len(ids), PREFILL_CHUNK):
            chunk = ids[start:start + PREFILL_CHUNK]
            R, n = len(chunk), cache.length
            bucket = self._prefill_bucket(R, n)
            if bucket is not None:
                bucket.replay(chunk, n)
                cache.advance(R)
                continue
            t = torch.tensor(chunk, dtype=torch.long, device=rt.device)
            pos = torch.arange(n, n + R, device=rt.device)
            mask = torch.ones(R, n + R, dtype=torch.bool, device=rt.device)
            mask[:, n:] = torch.tril(mask[:, n:])
            rt.model.forward(t, pos, mask, cache, pos, last_only=True)
            cache.advance(R)

    def verify(self, tokens: Sequence[int], depths: Sequence[int], ancestors: torch.Tensor,
               need_logits: bool = True, exit_layer: int | None = None,
               summary: bool = False, ahead: bool = False) -> RowScores:
        """One forward pass over a window of R rows at the committed length n. Row 0 is
        `tokens[0]`, the root (the last committed token, not yet in the cache). Row i sits at
        position n + depths[i] and attends to the committed prefix and to the rows c with
        ancestors[i, c] ([R, R] bool: itself and its ancestors). A draft tree gives both arrays
        (TokenTree.row_depths, TokenTree.ancestor_mask); a plain run of tokens, `chain(R)`.
        `exit_layer` K: the first K layers only, then the norm and LM head (an early-exit draft
        pass; see Transformer.forward). Row i's keys go to slot n + i; nothing is committed.
        `summary`, need_logits False: RowScores' log_norm and window_logits too (rows' detail).

        `ahead`: queue the plain step after this one on the device (engine.model.plain_queue)."""
        plain = len(tokens) == 1 and not need_logits and exit_layer is None and self.runtime.use_graphs
        q = self.plain_queue
        queued = q.take(self.cache.length, tokens[0], summary) if plain else None
        if queued is None:                      # (scratch drops a queued step not taken)
            return self.scratch(tokens, depths, ancestors, self.cache.length, need_logits,
                                exit_layer, summary, queue=ahead and plain)
        if ahead and queued.n + 2 <= self.cache.capacity:    # the next one first, then wait
            with torch.inference_mode():
                q.queue(self._bucket(1), queued.n, read_step(summary), summary)
        return q.scores(queued)

    @torch.inference_mode()
    def scratch(self, tokens: Sequence[int], depths: Sequence[int], ancestors: torch.Tensor,
                at: int, need_logits: bool = True, exit_layer: int | None = None,
                summary: bool = False, queue: bool = False) -> RowScores:
        """`verify` as if `at` tokens were committed: the rows attend to slots [0, at) whatever
        they hold and write slots [at, at + R) only; the committed length stays. `at` below the
        committed length would overwrite committed keys, so it is refused."""
        rt, cache = self.runtime, self.cache
        self.plain_queue.drop()        # any pass replays a bucket a queued step continues from
        if exit_layer is not None and not 1 <= exit_layer <= rt.config.n_layers:
            raise ParameterError(f"--exit-layer must be between 1 and the model's "
                                 f"{rt.config.n_layers} layers, got {exit_layer}")
        if not cache.length <= at <= cache.capacity:
            raise ParameterError(f"a scratch pass at length {at} would write over the "
                                 f"{cache.length} committed tokens (or past {cache.capacity})")
        R, n = len(tokens), at
        check_window(R, depths, ancestors)
        summary = summary and not need_logits
        if rt.use_graphs:
            return self._verify_graph(tokens, depths, ancestors, n, need_logits, exit_layer,
                                      summary, queue)
        if n + R > cache.capacity:
            raise ParameterError("the window does not fit in the KV cache")
        t = torch.tensor(tokens, dtype=torch.long, device=rt.device)
        depth = torch.tensor(depths, dtype=torch.long, device=rt.device)
        mask = None
        if rt.model.needs_mask:
            mask = torch.ones(R, n + R, dtype=torch.bool)
            mask[:, n:] = ancestors
            mask = mask.to(rt.device)
        layout = WindowLayout(n, depth, ancestor_table(depths, ancestors).to(rt.device))
        slots = torch.arange(n, n + R, device=rt.device)
        logits = rt.model.forward(t, depth + n, mask, cache, slots, layout=layout,
                                  exit_layer=exit_layer, top=0 if need_logits or summary else TOPK)
        if isinstance(logits, tuple):       # the head's top k alone (a screened CPU head)
            return RowScores(None, logits[0], logits[1])
        if summary:                         # the whole logits (the normaliser needs them)
            return summarize(logits, t, *head_top(rt.model, logits, TOPK))
        values, ids = top_k(logits, TOPK)
        return RowScores(logits.cpu() if need_logits else None, values.cpu(), ids.cpu())

    def _prefill_bucket(self, R: int, n: int) -> PrefillBucket | None:
        """The bucket for a prefill chunk of R rows at committed length n, or None where there
        is none: no graphs, or the padded chunk does not fit the request's cache.

        Same prompt, same bits: a chunk's computation depends only on (R, n) and the request,
        never on what the session ran before. So a bucketed chunk always runs through its
        bucket (captured on first use on a GPU, replayed ever after; run eagerly with the same
        padded shapes on a CPU), never once eagerly at its own shape and later from a graph
        at the padded one: those round differently, and a runtime that had decoded a prompt
        with the same chunk shape before gave other tokens than a fresh one (issue 31). The fit
        is judged against the capacity a fresh session would have for this request
        (`request_capacity`), not the cache's: a reused session may be larger."""
        if not self.runtime.use_graphs:
            return None
        B = next((b for b in PREFILL_BUCKETS if b >= R), None)
        C = self.request_capacity
        if B is None or n + B > C:
            return None
        span = min(C, max(B, 1 << (n + B - 1).bit_length()))
        key = (B, span)
        if key not in self._prefills:
            self._prefills[key] = PrefillBucket(self.runtime, self.cache, B, span)
        return self._prefills[key]

    def _bucket(self, R: int, exit_layer: int | None = None) -> GraphBucket:
        b = next((b for b in GRAPH_BUCKETS if b >= R), None)
        if b is None:
            raise ParameterError(f"a window of {R} rows is more than the largest graph bucket "
                                 f"({GRAPH_BUCKETS[-1]}): lower --depth or --width")
        if (b, exit_layer) not in self._buckets:
            self._buckets[b, exit_layer] = GraphBucket(self.runtime, self.cache, b, exit_layer)
        return self._buckets[b, exit_layer]

    def _verify_graph(self, tokens: Sequence[int], depths: Sequence[int], ancestors: torch.Tensor,
                      n: int, need_logits: bool, exit_layer: int | None = None,
                      summary: bool = False, queue: bool = False, wait: bool = True) -> RowScores:
        g = self._bucket(R := len(tokens), exit_layer)
        if n + g.rows > self.cache.capacity:
            raise ParameterError("the window does not fit in the KV cache")
        g.replay(tokens, depths, ancestors, n)
        if not wait:                        # launch: the top k's copy home, not waited for
            return Step(g.top[:R], top_scores, g.pinned)
        if queue and n + 2 <= self.cache.capacity:      # verify's ahead: a plain step, one row
            return self.plain_queue.scores(self.plain_queue.queue(g, n, read_step(summary), summary))
        if summary:                         # g.packed[:R]: the window's tokens, on the device
            return summarize(g.logits[:R], g.packed[:R], g.top_values[:R], g.top_ids[:R])
        scores = top_scores(g.top[:R].cpu())            # one copy back: the top k's values and ids
        scores.logits = g.logits[:R].float().cpu() if need_logits else None
        return scores

    def time_verify_pass(self, n_rows: int, context: int, exit_layer: int | None = None) -> float:
        return time_pass(self, n_rows, context, exit_layer)


def check_window(R: int, depths: Sequence[int], ancestors: torch.Tensor) -> None:
    """A window of R rows comes with R depths and an [R, R] ancestor mask."""
    if len(depths) != R or tuple(ancestors.shape) != (R, R):
        raise ValueError(f"a window of {R} rows needs {R} depths and ancestors [{R}, {R}], "
                         f"got {len(depths)} and {tuple(ancestors.shape)}")


def launch(self: Session, tokens: Sequence[int], depths: Sequence[int],
           ancestors: torch.Tensor, need_logits: bool = True, summary: bool = False,
           ahead: bool = False) -> "Step | RowScores":
    """Session.verify, without waiting where it need not. A window of the graph's
    fast path (no logits, no summary, not a plain step) comes back as a Step
    (engine.model.plain_queue) whose top k is on its way to the host; `Step.scores()` waits for
    it, so the host may do other work (the last window's event) while the card runs the pass.
    Anything else is `verify`'s RowScores, already there. Nothing may run on the session
    between the launch and `scores()`."""
    R = len(tokens)
    if R > 1 and self.runtime.use_graphs and not need_logits and not summary:
        check_window(R, depths, ancestors)
        with torch.inference_mode():
            self.plain_queue.drop()
            return self._verify_graph(tokens, depths, ancestors, self.cache.length, False,
                                      wait=False)
    return self.verify(tokens, depths, ancestors, need_logits=need_logits, summary=summary,
                       ahead=ahead)


def time_pass(self: Session, n_rows: int, context: int, exit_layer: int | None = None) -> float:
    """Milliseconds of one verify pass of n_rows (a chain) at `context` committed tokens on a
    session (Session.time_verify_pass): a scratch pass (the cache contents do not matter for cost, only the length), so a
    probe at context >= the committed length is safe in the middle of a run."""
    cfg = self.runtime.config
    if context + n_rows > cfg.max_context:
        raise ParameterError(f"a probe pass at context {context:,} with {n_rows} rows needs more than "
                             f"the model's context of {cfg.max_context:,}: lower --context")
    if context + n_rows > self.cache.capacity:
        if self.length:
            raise ParameterError(f"a probe pass at context {context:,} with {n_rows} rows does "
                                 f"not fit this stream's {self.cache.capacity:,} slots")
        self.reserve(context + n_rows, spare=MAX_ROWS)
    dev = self.runtime.device
    synchronize(dev)
    t0 = time.perf_counter()
    # the chain's arrays are built inside the timed span, as a window's are in the decoder
    self.scratch([1] * n_rows, *chain(n_rows), at=context, need_logits=False,
                 exit_layer=exit_layer)
    synchronize(dev)
    return (time.perf_counter() - t0) * 1e3


class LayerView:
    """A session seen through the model's first k layers (self-speculation: Elhoushi et al.
    2024, "LayerSkip"): its passes run those layers, the final norm and the LM head over the
    session's cache, writing only those layers' keys in scratch slots."""

    def __init__(self, session: Session, k: int) -> None:
        L = session.runtime.config.n_layers
        if not 1 <= k <= L:
            raise ParameterError(f"--exit-layer must be between 1 and the model's {L} layers, got {k}")
        self.session = session
        self.exit_layer = k

    @property
    def length(self) -> int:
        return self.session.length

    def room(self) -> int:
        return self.session.room()

    def window_room(self) -> int:
        return self.session.window_room()

    def warm_up(self) -> None:
        self.session.warm_up(self.exit_layer)

    def scratch(self, tokens: Sequence[int], depths: Sequence[int], ancestors: torch.Tensor,
                at: int) -> RowScores:
        return self.session.scratch(tokens, depths, ancestors, at, exit_layer=self.exit_layer)
