"""A llama.cpp command true of the pinned version (llama.cpp 0c1e570, 2026-10-01), from a sweep
cell or priced on llama.cpp's own measured curve.

    llama-server -m MODEL --spec-type ngram-simple --spec-ngram-simple-size-n 4 --spec-ngram-simple-size-m 16

What the notes say, each from the tree's code (common/ngram-map.cpp, common/speculative.cpp,
common/arg.cpp):
- speculative settings are the server's, given at start (llama-server flags), not per request;
- ngram-simple copies what followed the LAST earlier match of exactly size_n tokens, up to size_m
  tokens; a last match with fewer than size_n tokens after it drafts nothing (ngram-map.cpp 96-102),
  so size_m < size_n never drafts;
- ngram-map-k4v drafts only when one continuation dominates (seen at least twice as often as all
  the others together, ngram-map.cpp 495-499);
- the n-gram sizes are per type; --draft-max/--draft-min and --spec-ngram-size-n/-m were removed
  (arg.cpp 4383-4421), --spec-draft-n-max/-n-min apply to draft models only;
- a draft model is `-md FILE --spec-type draft-simple --spec-draft-n-max N --spec-draft-n-min 0`.
"""

from __future__ import annotations

import shlex
from typing import Any

from engine.errors import ParameterError
from engine.speculation.settings import LLAMACPP_DRAFTERS
from engine.tuning.llamacpp_price import LlamaCppConfig, Priced

LLAMA_SERVER = "llama-server"
NO_GAIN = "plain decoding: no speculative configuration pays on this card"

PER_SERVER = ("llama.cpp takes speculative settings per server (llama-server flags at start), "
              "not per request: every request to this server drafts this way")
REMOVED = ("--draft-max/--draft-min and --spec-ngram-size-n/-m are gone from this llama.cpp "
           "(April 2026, PR #22397): n-gram sizes are per type, --spec-draft-n-max/-n-min are for "
           "draft models only")


def type_notes(cfg: LlamaCppConfig) -> list[str]:
    if cfg.spec_type == "ngram-simple":
        return [f"ngram-simple copies up to {cfg.size_m} tokens after the LAST earlier match of exactly "
                f"{cfg.size_n} tokens; a last match followed by fewer than {cfg.size_n} tokens drafts "
                "nothing (no older match is tried)"]
    if cfg.spec_type == "ngram-map-k":
        return [f"ngram-map-k drafts the {cfg.size_m} tokens after a hashed earlier match of "
                f"{cfg.size_n} tokens, then only as many as were accepted from that key last time"]
    return [f"ngram-map-k4v (experimental in llama.cpp) drafts only when one continuation of the "
            f"{cfg.size_n}-token key dominates (at least twice as frequent as all others together)"]


def cell_config(s: dict[str, Any]) -> tuple[LlamaCppConfig, list[str]]:
    """The llama.cpp configuration nearest to a cell's settings, and where it differs."""
    notes = []
    depth, n = int(s["depth"]), int(s["ngram_max"])
    if s["draft"] in LLAMACPP_DRAFTERS:
        return LlamaCppConfig(s["draft"], n, depth), notes      # measured with its own drafter
    spec_type = "ngram-map-k4v" if s.get("match") == "frequent" else "ngram-simple"
    if s.get("match") == "first":
        notes.append("llama.cpp has no earliest-match rule: ngram-simple takes the last match "
                     "(our --match recent)")
    if n > depth:
        notes.append(f"size_n lowered from {n} to the depth {depth}: llama.cpp never drafts with "
                     "size_m < size_n")
        n = depth
    notes.append(f"llama.cpp matches one n-gram size ({n}); the cell backed off from {s['ngram_max']} "
                 f"to {s['ngram_min']} tokens when the longer one had no match (sweep with --drafts "
                 "ngram-simple to measure llama.cpp's own drafter)")
    if s["draft"] == "tree" and int(s.get("width", 1)) > 1:
        notes.append(f"llama.cpp has no token trees: only the main branch (depth {depth}) carries "
                     f"over; {int(s['width']) - 1} alternative branch(es) are dropped")
    if s.get("adaptive"):
        notes.append("llama.cpp has no cost model: the chooser's per-window depth and the AR floor "
                     "do not carry over")
    return LlamaCppConfig(spec_type, n, depth), notes


def command(model: str, cfg: LlamaCppConfig | None = None, *, draft_model: str | None = None,
            n_max: int | None = None, binary: str = LLAMA_SERVER) -> list[str]:
    words = [binary, "-m", model]
    if draft_model is not None:
        if not n_max or n_max < 1:
            raise ParameterError(f"a draft model needs n_max >= 1, got {n_max}")
        words += ["-md", draft_model, "--spec-type", "draft-simple",
                  "--spec-draft-n-max", str(n_max), "--spec-draft-n-min", "0"]
    elif cfg is not None:
        words += cfg.flags()
    return words


def cell_export(s: dict[str, Any], model: str) -> tuple[str, tuple[str, ...]]:
    """(command line, notes) for a sweep cell's settings, unpriced."""
    if s["draft"] in ("model", "early-exit"):
        if s["draft"] == "early-exit":
            raise ParameterError("llama.cpp has no early-exit drafter: export an n-gram cell")
        words = command(model, draft_model=str(s.get("draft_model") or "DRAFT.gguf"),
                        n_max=int(s["depth"]))
        return shlex.join(words), (PER_SERVER, "a draft model drafts a chain: width does not carry over")
    cfg, notes = cell_config(s)
    return shlex.join(command(model, cfg)), tuple(notes + type_notes(cfg) + [PER_SERVER, REMOVED])


def priced_lines(chosen: Priced | None, ranked: list[Priced], plain_tok_s: float, label: str,
                 top: int = 5) -> list[str]:
    """What the priced export says on stderr: the prediction and the runners-up."""
    lines = [f"priced on {label}: plain decoding {plain_tok_s:.1f} tok/s"]
    if chosen is not None:
        lines.append(f"predicted {chosen.tok_s:.1f} tok/s with {chosen.config.id} "
                     f"({chosen.ratio:.2f}x plain; {chosen.tokens_per_pass:.2f} tokens a pass, "
                     f"{100 * chosen.drafted:.0f}% of windows drafted; medians over prompts)")
    elif ranked:
        b = ranked[0]
        lines.append(f"the best configuration, {b.config.id}, is predicted at {b.tok_s:.1f} tok/s "
                     f"({b.ratio:.2f}x plain)")
    lines.append(f"{'configuration':<26} {'tok/s':>8} {'x plain':>8} {'tok/pass':>9}")
    for p in ranked[:top]:
        lines.append(f"{p.config.id:<26} {p.tok_s:>8.1f} {p.ratio:>8.2f} {p.tokens_per_pass:>9.2f}")
    return lines
