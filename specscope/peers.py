"""The rows `specscope bench` runs: our decoder's settings and the peers users would pick instead.

Every row is one way to decode a prompt greedily; `Row.run(ids, max_new)` takes our tokenizer's
prompt ids (the same ids for every engine: no peer re-tokenizes text) and returns a `Sample`:
the new token ids, the wall seconds from the first forward of the prompt to the last token, and
the count of token-producing forward passes (None where the engine hides it).

    ours:          AR (draft none), lookup, tree, adaptive (the cost model picks depth and width)
    transformers:  generate greedy; prompt_lookup_num_tokens 10 and 3 (same GGUF, device, dtype)
    llama.cpp:     plain; LlamaPromptLookupDecoding num_pred_tokens 10 and 2 (CPU, same GGUF,
                   run natively in its quantized form)

A peer that is not installed (or cannot run this model or device) raises `PeerSkipped` with the
reason; the bench reports it as skipped, never as a failure. Peers are imported lazily: the
engine does not depend on them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from engine.speculation.decoder import Decoder
from engine.cost.probe import card_profile
from engine.model.device import synchronize
from engine.model.runtime import Runtime
from engine.speculation.settings import DecodeSettings

OURS = ("ar", "lookup", "tree", "adaptive")
PEERS = ("transformers", "llamacpp")
ENGINE = {"ours": "specscope", "transformers": "transformers", "llamacpp": "llama.cpp"}
Progress = Callable[[str, "float | None"], None]   # (message, fraction or None)

# the prompt-lookup settings compared: transformers' default suggestion (10) and a
# short one (3); llama-cpp-python's default (10) and the short one its README uses (2)
TRANSFORMERS_PLD = (10, 3)
LLAMACPP_PLD = (10, 2)


class PeerSkipped(Exception):
    """A peer that cannot run here: the message says why and how to get it."""


@dataclass
class Sample:
    tokens: list[int]                 # new token ids (eos included when it stopped there)
    wall_s: float                     # first forward of the prompt .. last token
    forward_passes: int | None        # token-producing passes; None: the engine does not say
    first_token_s: float | None = None   # first forward of the prompt .. first new token
    extra: dict[str, Any] = field(default_factory=dict)
    first_tokens: int = 1             # tokens that came with the first (ours: the first window's)


@dataclass(frozen=True)
class Row:
    name: str                         # "ours-tree", "transformers-pld10", "llamacpp-plain", ...
    engine: str                       # "specscope" | "transformers" | "llama.cpp"
    label: str                        # for tables and plots
    params: dict[str, Any] = field(compare=False)
    run: Callable[[list[int], int], Sample] = field(compare=False, repr=False)


# ---------------------------------------------------------------------------------------------
# ours


def _ours_settings(kind: str, max_new: int) -> DecodeSettings:
    if kind == "ar":
        return DecodeSettings(draft="none", max_new_tokens=max_new)
    if kind == "lookup":
        return DecodeSettings(draft="lookup", max_new_tokens=max_new)
    if kind == "tree":
        return DecodeSettings(draft="tree", max_new_tokens=max_new)
    if kind == "adaptive":
        return DecodeSettings(draft="tree", adaptive=True, max_new_tokens=max_new)
    raise ValueError(kind)


def our_rows(rt: Runtime, kinds: tuple[str, ...] = OURS) -> list[Row]:
    labels = {"ar": "specscope plain decoding", "lookup": "specscope lookup", "tree": "specscope tree",
              "adaptive": "specscope adaptive"}
    rows = []
    for kind in kinds:
        def run(ids: list[int], max_new: int, kind: str = kind) -> Sample:
            dec = Decoder(rt, ids, _ours_settings(kind, max_new), detail=False)
            r = dec.run()
            # forward_passes counts the windows; the prefill of prompt[:-1] is one more pass
            # that produces no token (a peer's first pass prefills and emits the first token).
            # first_token_s: the decoder's clock starts at the prefill; the first window may
            # bring more than one token (first_tokens)
            return Sample(r["tokens"], r["wall_s"], r["forward_passes"], r["first_token_s"],
                          {k: r[k] for k in ("proposed_draft_tokens", "accepted_draft_tokens",
                                             "finish_reason", "profile")},
                          first_tokens=r["first_tokens"] or 1)
        s = _ours_settings(kind, 1).to_dict()
        params = {k: s[k] for k in ("draft", "depth", "width", "ngram_min", "ngram_max", "match",
                                    "adaptive", "ar_floor")}
        rows.append(Row(f"ours-{kind}", "specscope", labels[kind], params, run))
    return rows


# ---------------------------------------------------------------------------------------------
# transformers


def load_transformers(source: Path, device: torch.device, dtype: torch.dtype) -> Any:
    """transformers' own load of the same model file (a GGUF is dequantized to `dtype`)."""
    if importlib.util.find_spec("transformers") is None:
        raise PeerSkipped("transformers is not installed: pip install 'specscope[bench]'")
    try:
        from transformers import AutoModelForCausalLM
        if source.is_file():
            model = AutoModelForCausalLM.from_pretrained(str(source.parent), gguf_file=source.name,
                                                         dtype=dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype)
    except Exception as e:   # an installed peer that cannot read this model: skip, say why
        raise PeerSkipped(f"transformers could not load {source.name}: "
                          f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    return model.to(device).eval()


class _Stamps:
    """A generate() streamer that only notes when each put arrives: the first put is the prompt,
    the second the first new token(s). (transformers' BaseStreamer interface: put, end.)"""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def transformers_rows(model: Any, eos_ids: tuple[int, ...],
                      pld: tuple[int, ...] = TRANSFORMERS_PLD) -> list[Row]:
    from transformers import GenerationConfig

    device = model.device
    pad = eos_ids[0] if eos_ids else None

    def make(n_lookup: int | None) -> Callable[[list[int], int], Sample]:
        def run(ids: list[int], max_new: int) -> Sample:
            cfg = GenerationConfig(max_new_tokens=max_new, do_sample=False,
                                   eos_token_id=list(eos_ids), pad_token_id=pad,
                                   prompt_lookup_num_tokens=n_lookup)
            calls = [0]
            # every call of the model's forward is one pass (prompt lookup drafts without it)
            hook = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
            inp = torch.tensor([ids], device=device)
            stamps = _Stamps()
            try:
                synchronize(device)
                t0 = time.perf_counter()
                with torch.inference_mode():
                    out = model.generate(inp, attention_mask=torch.ones_like(inp),
                                         generation_config=cfg, streamer=stamps)
                synchronize(device)
                wall = time.perf_counter() - t0
            finally:
                hook.remove()
            first = stamps.times[1] - t0 if len(stamps.times) > 1 else None
            return Sample(out[0, len(ids):].tolist(), wall, calls[0], first)
        return run

    rows = [Row("transformers-greedy", "transformers", "transformers generate",
                {"do_sample": False}, make(None))]
    for k in pld:
        rows.append(Row(f"transformers-pld{k}", "transformers", f"transformers lookup {k}",
                        {"do_sample": False, "prompt_lookup_num_tokens": k,
                         "max_matching_ngram_size": 2}, make(k)))
    return rows


# ---------------------------------------------------------------------------------------------
# llama.cpp (llama-cpp-python)


def llamacpp_rows(source: Path, device: torch.device, n_ctx: int, eos_ids: tuple[int, ...],
                  threads: int | None = None, pld: tuple[int, ...] = LLAMACPP_PLD) -> list[Row]:
    """llama.cpp plain and with prompt lookup, on the CPU, reading the GGUF natively."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise PeerSkipped("llama-cpp-python is not installed: pip install 'specscope[llamacpp]' "
                          "(it compiles llama.cpp, several minutes)")
    if device.type != "cpu":
        raise PeerSkipped(f"the llama.cpp rows run on the CPU only (a GPU build of "
                          f"llama-cpp-python is a separate install); this run is on {device.type}")
    if not source.is_file() or source.suffix.lower() != ".gguf":
        raise PeerSkipped(f"llama.cpp reads GGUF files only; {source.name} is not one")
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    threads = threads or torch.get_num_threads() or os.cpu_count() or 1
    eos = set(eos_ids)

    def make(n_pred: int | None) -> Callable[[list[int], int], Sample]:
        draft = LlamaPromptLookupDecoding(num_pred_tokens=n_pred) if n_pred else None
        try:
            # logits_all with a draft model: llama-cpp-python turns it on itself but sizes its
            # score buffer from the argument (0.3.36), which overflows on the first draft
            llm = Llama(model_path=str(source), n_ctx=n_ctx, n_threads=threads,
                        n_threads_batch=threads, n_batch=512, draft_model=draft,
                        logits_all=draft is not None, seed=0, verbose=False)
        except Exception as e:
            raise PeerSkipped(f"llama.cpp could not load {source.name}: {e}") from None
        calls = [0]
        evaluate = llm.eval

        def counted_eval(tokens):
            calls[0] += 1             # one eval = one forward over a batch (prompt or draft)
            return evaluate(tokens)
        llm.eval = counted_eval       # generate() calls self.eval once per pass

        def run(ids: list[int], max_new: int) -> Sample:
            llm.reset()               # no prefix reuse from the previous run: prefill every time
            calls[0] = 0
            out: list[int] = []
            first = None
            t0 = time.perf_counter()
            for t in llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                  repeat_penalty=1.0, reset=True):
                out.append(int(t))
                if first is None:
                    first = time.perf_counter() - t0
                if t in eos or len(out) >= max_new:
                    break
            return Sample(out, time.perf_counter() - t0, calls[0], first)
        return run

    rows = [Row("llamacpp-plain", "llama.cpp", "llama.cpp", {"threads": threads}, make(None))]
    for k in pld:
        rows.append(Row(f"llamacpp-pld{k}", "llama.cpp", f"llama.cpp lookup {k}",
                        {"threads": threads, "num_pred_tokens": k, "max_ngram_size": 2},
                        make(k)))
    return rows


def peer_version(peer: str) -> str | None:
    dist = {"transformers": "transformers", "llamacpp": "llama_cpp_python"}[peer]
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------
# opening every row


def ensure_profile(rt: Runtime, progress: Progress | None = None, **probe_args: Any):
    """The cost profile the adaptive row prices windows with: a saved or bundled one, else a probe
    now (saved, so the decoder finds it), before any clock starts."""
    return card_profile(rt, progress=progress, **probe_args)


def open_rows(rt: Runtime, ours: tuple[str, ...], peers: tuple[str, ...], n_ctx: int,
              progress: Progress | None = None, hf_model: Any = None,
              probe_args: dict[str, Any] | None = None,
              ) -> tuple[list[Row], list[dict[str, str]], dict[str, Any]]:
    """Our rows and the rows of every peer that can run here; the skipped peers with their
    reasons; facts for the JSON (the adaptive row's profile, load seconds). n_ctx: the context
    a run needs at most (prompt + new tokens + a window). hf_model: an already loaded
    transformers model (tests pass their session fixture)."""
    say = progress or (lambda *_: None)
    extra: dict[str, Any] = {"load_s": {"ours": round(rt.load_s, 3)}}
    if "adaptive" in ours:
        say("cost profile for the adaptive row (probing, if none is saved)", None)
        prof = ensure_profile(rt, progress, **(probe_args or {}))
        extra["adaptive_profile"] = {"id": prof.id, "source": prof.source, "kind": prof.kind}
    rows = our_rows(rt, ours)
    skipped = []
    eos = tuple(rt.tokenizer.eos_ids)
    for peer in peers:
        t0 = time.perf_counter()
        try:
            if peer == "transformers":
                model = hf_model
                if model is None:
                    say("loading the model in transformers", None)
                    model = load_transformers(rt.loaded.source, rt.device, rt.dtype)
                rows += transformers_rows(model, eos)
            elif peer == "llamacpp":
                say("loading the model in llama.cpp", None)
                rows += llamacpp_rows(rt.loaded.source, rt.device, n_ctx, eos)
            else:
                raise ValueError(peer)
        except PeerSkipped as e:
            skipped.append({"peer": peer, "engine": ENGINE[peer], "reason": str(e)})
            say(f"skipped {ENGINE[peer]}: {e}", None)
            continue
        extra["load_s"][peer] = round(time.perf_counter() - t0, 3)
    return rows, skipped, extra
