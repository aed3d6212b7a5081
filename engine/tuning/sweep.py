"""The sweep: every cell of a grid (engine.tuning.grid) decoded on this device, on every prompt
of a workload, measured against plain decoding (AR) on the same prompts.

    sweep = Sweep(rt, cfg, prompts, previous=load_sweep(dir) if resuming else None)
    for step in sweep.steps():          # one step after the AR baseline and after each cell
        save_sweep(step.result, dir)     # always a valid, complete-so-far file
        print(step.message, step.eta_s)

Per cell and prompt: tok/s (prefill included, as `generate --json` reports it), decode tok/s
(the tokens after the first window over the time after it: the prefill, the same for every
cell, left out), tokens per verify pass, and the ratio of its decode tok/s to AR's on that
prompt; the cell's figures are the medians over the prompts. Greedy outputs are compared with
AR's token for token (`identical_to_ar`). A finished cell is never run again: a sweep handed its
own earlier result resumes where it stopped.

Skipping. With a cost profile, a cell whose shallower neighbour (same drafter and width) has
run is predicted before it runs: one acceptance rate a is fitted to the neighbour's tokens per
pass t0 through t = (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023), the cell's tokens per pass
projected to its depth, and priced on the profile, t * ms(1) / ms(rows), scaled by the
neighbour's measured / modelled ratio. A cell predicted below best * (1 - skip_margin), best
being the highest ratio measured so far, is skipped and recorded as such.

Drift. AR runs first and, once the cells are done, again: `ar.drift` is the median of the end
tok/s over the start tok/s per prompt (1.0: the machine kept its speed; on a shared machine a
drift of 0.8 means every ratio after the start is up to 20% high or low).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from engine.cost.baseline import Baseline
from engine.cost.probe import card_profile
from engine.errors import ParameterError
from engine.io.prompts import encode_prompt
from engine.io.workloads import WorkloadPrompt
from engine.cost.acceptance import expected_tokens, fit_acceptance
from engine.session import draft_opener
from engine.speculation.decoder import Decoder
from engine.tuning.grid import Cell, SweepConfig, ar_settings, plan_cells
from engine.tuning.sweep_file import KIND, VERSION, measured, summarize


class SweepCancelled(Exception):
    """The stop flag was set; the result holds every cell finished before it."""


@dataclass(frozen=True)
class SweepStep:
    result: dict[str, Any]      # the whole result so far (the object the sweep keeps updating)
    cell: str                   # "ar" or the cell id just finished
    done: int                   # cells finished (AR counts as one), skipped ones included
    total: int
    eta_s: float | None         # time left at the pace so far (None before the first run)
    message: str

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0


def predict_ratio(neighbour: dict[str, Any], cell: Cell, profile) -> float:
    """The cell's ratio to AR predicted from a measured shallower `neighbour` (module docstring)."""
    a = fit_acceptance(neighbour["tokens_per_pass"], neighbour["depth"])
    def model(t: float, rows: int) -> float:
        return t * profile.ms(1) / profile.ms(rows)
    scale = neighbour["ratio_to_ar"] / model(neighbour["tokens_per_pass"], neighbour["rows"])
    return scale * model(expected_tokens(a, cell.depth), cell.rows)


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def plain_words(ar: dict[str, Any]) -> str:
    """The progress line after the plain-decoding runs: the baseline as every view names it
    (engine.cost.baseline.Baseline.label(), decode tok/s) and the tok/s with the prefill in.

    >>> plain_words({"tok_s": 12.3, "decode_tok_s": 15.04})
    'plain decoding 15.0 tok/s (measured) · 12.3 tok/s incl. prefill'
    """
    prefill = f"{ar['tok_s']:.1f} tok/s incl. prefill"
    dec = ar.get("decode_tok_s")
    return f"{Baseline(dec, 'measured').label()} · {prefill}" if dec else f"plain decoding: {prefill}"


def cell_words(entry: dict[str, Any]) -> str:
    """A measured cell's progress line, worded as the race's lanes: decode tok/s and its ratio to
    plain decoding's (decode against decode), then tok/s with the prefill in and tokens per pass.

    >>> cell_words({"tok_s": 20.0, "decode_tok_s": 30.0, "ratio_to_ar": 2.0, "tokens_per_pass": 2.5})
    'decode 30.0 tok/s (2.00x plain decoding) · 20.0 tok/s incl. prefill · 2.50 tok/pass'
    """
    dec = entry.get("decode_tok_s")
    decode = (f"decode {dec:.1f} tok/s ({entry['ratio_to_ar']:.2f}x plain decoding)" if dec
              else "decode tok/s: none (nothing after the first token)")
    return (f"{decode} · {entry['tok_s']:.1f} tok/s incl. prefill · "
            f"{entry['tokens_per_pass']:.2f} tok/pass")


class Sweep:
    def __init__(self, rt, cfg: SweepConfig, prompts: list[WorkloadPrompt],
                 previous: dict[str, Any] | None = None, profile=None,
                 stop: threading.Event | None = None,
                 progress: Callable[[str, float], None] | None = None):
        self.rt, self.cfg, self.prompts = rt, cfg, prompts
        self.profile = profile
        self.stop = stop or threading.Event()
        self.progress = progress           # the one-time profile probe reports here
        self.ids = {p.id: encode_prompt(rt.tokenizer, list(p.messages)) for p in prompts}
        self.cells = plan_cells(cfg)
        self.result = self._start(previous)
        self._runs_s: list[float] = []      # seconds per prompt decode, for the time left

    # -- the result -----------------------------------------------------------------------
    def _header(self) -> dict[str, Any]:
        rt = self.rt
        return {"kind": KIND, "version": VERSION, "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "config": self.cfg.to_dict(), "device": rt.device_name, "dtype": rt.dtype_name,
                "weights": rt.weights_label,
                "model": {"source": str(rt.loaded.source), "name": rt.model_id,
                          "format": rt.loaded.format},
                # the ids let llama.cpp's drafters be replayed on AR's outputs (tuning.llamacpp_price)
                "prompts": [{"id": p.id, "category": p.category, "prompt_tokens": len(self.ids[p.id]),
                             "ids": self.ids[p.id]} for p in self.prompts]}

    def _start(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        head = self._header()
        planned = [c.id for c in self.cells]
        if previous is None:
            return {**head, "profile": None, "ar": None, "cells": [], "planned": planned,
                    "best": None, "adaptive_vs_best": {}, "skipped": 0, "complete": False,
                    "sweep_s": 0.0}
        mine = self.cfg.identity()
        theirs = {k: previous.get("config", {}).get(k) for k in mine}
        for key, here in (*mine.items(), ("device", head["device"]), ("dtype", head["dtype"]),
                          ("model", head["model"]["name"])):
            there = theirs.get(key) if key in mine else (
                previous.get(key) if key != "model" else previous.get("model", {}).get("name"))
            if there != here:
                raise ParameterError(
                    f"the saved sweep was run with {key} {there!r}, this one with {here!r}: "
                    "use another --out folder (or delete the old sweep.json) to start afresh")
        keep = [c for c in previous["cells"] if c["id"] in planned]
        result = {**previous, **head, "cells": keep, "planned": planned, "complete": False}
        summarize(result)
        return result

    # -- running --------------------------------------------------------------------------
    def _decode(self, settings, pid: str) -> dict[str, Any]:
        if self.stop.is_set():
            raise SweepCancelled()
        t0 = time.perf_counter()
        dec = Decoder(self.rt, self.ids[pid], settings, stop=self.stop, detail=False,
                      profile=self.profile if settings.adaptive else None,
                      open_model=draft_opener(self.rt), progress=self.progress)
        r = dec.run()
        if r["finish_reason"] == "stopped":
            raise SweepCancelled()
        # decoding alone, the report's decode_tok_s: the tokens after the first window over the
        # time after it (the prefill, the same for every cell, is left out, so short runs on long
        # prompts still tell cells apart); a run with nothing after its first window: its tok_s
        if r["decode_tok_s"] is None:
            r["decode_tok_s"] = r["tok_s"]
        self._runs_s.append(time.perf_counter() - t0)
        self.result["sweep_s"] = round(self.result.get("sweep_s", 0.0) + self._runs_s[-1], 3)
        return r

    def _eta(self, cells_left: int) -> float | None:
        if not self._runs_s:
            return None
        return statistics.mean(self._runs_s) * cells_left * len(self.prompts)

    def _warm_up(self) -> None:
        """The cost profile (the adaptive row and the skip rule price on it), then one untimed
        short run: first kernels, graphs and caches are not any cell's cost."""
        if self.profile is None and (self.cfg.adaptive or self.cfg.skip_margin > 0):
            # re-timed when saved (as the decoder does): a profile probed on a busy machine
            # would misprice the adaptive row and the skip rule
            self.profile = card_profile(self.rt, progress=self.progress, check=True)
        self.result["profile"] = getattr(self.profile, "id", None)
        if self.cfg.warmup_tokens:
            s = replace(self.cells[0].settings(self.cfg),
                        max_new_tokens=min(self.cfg.warmup_tokens, self.cfg.new_tokens))
            Decoder(self.rt, self.ids[self.prompts[0].id], s, stop=self.stop, detail=False,
                    open_model=draft_opener(self.rt)).run()

    def steps(self) -> Iterator[SweepStep]:
        total = 1 + len(self.cells)
        res = self.result
        finished = {c["id"] for c in res["cells"]}
        done = len(finished) + (res["ar"] is not None)
        todo = [c for c in self.cells if c.id not in finished]
        if res["ar"] is None or todo:
            self._warm_up()
        if res["ar"] is None:
            per = []
            for p in self.prompts:
                r = self._decode(ar_settings(self.cfg), p.id)
                per.append({"prompt": p.id, "tok_s": r["tok_s"], "decode_tok_s": r["decode_tok_s"],
                        "tokens_per_pass": r["tokens_per_pass"], "new_tokens": r["new_tokens"],
                        "wall_s": r["wall_s"], "tokens": r["tokens"]})
            res["ar"] = {"tok_s": _median([x["tok_s"] for x in per]),
                         "decode_tok_s": _median([x["decode_tok_s"] for x in per]),
                         "tokens_per_pass": _median([x["tokens_per_pass"] for x in per]),
                         "per_prompt": per}
            done += 1
            yield SweepStep(res, "ar", done, total, self._eta(len(todo)), plain_words(res["ar"]))
        ar = {x["prompt"]: x for x in res["ar"]["per_prompt"]}
        for i, cell in enumerate(todo):
            entry = self._skip(cell) or self._measure(cell, ar)
            res["cells"].append(entry)
            summarize(res)
            done += 1
            if i == len(todo) - 1:
                self._drift()           # before the last step, so its result is the final one
            res["complete"] = done == total
            what = (f"skipped (predicted {entry['predicted_ratio']:.2f}x plain decoding)"
                    if entry["status"] == "skipped" else cell_words(entry))
            yield SweepStep(res, cell.id, done, total, self._eta(len(todo) - i - 1),
                            f"{cell.id}: {what}")
        res["complete"] = True

    def _drift(self) -> None:
        """AR once more after the cells: how far the machine's speed moved while they ran (a
        shared machine drifts; the ratios are against the AR measured before the cells)."""
        per = self.result["ar"]["per_prompt"]
        for x in per:
            x["decode_tok_s_end"] = self._decode(ar_settings(self.cfg), x["prompt"])["decode_tok_s"]
        self.result["ar"]["drift"] = _median([x["decode_tok_s_end"] / x["decode_tok_s"] for x in per
                                              if x["decode_tok_s"]] or [1.0])

    def _entry(self, cell: Cell) -> dict[str, Any]:
        s = cell.settings(self.cfg)
        return {"id": cell.id, "draft": cell.draft, "depth": cell.depth, "width": cell.width,
                "adaptive": cell.adaptive, "ar_floor": s.ar_floor, "rows": cell.rows,
                "settings": s.to_dict(), "status": "done", "tok_s": None, "tokens_per_pass": None,
                "ratio_to_ar": None, "predicted_ratio": None, "skip_reason": None, "per_prompt": []}

    def _skip(self, cell: Cell) -> dict[str, Any] | None:
        """The skipped entry, when the cost profile predicts the cell loses by the margin."""
        if cell.adaptive or self.cfg.skip_margin <= 0 or self.profile is None:
            return None
        best = max((c["ratio_to_ar"] for c in measured(self.result)), default=None)   # finite ratios
        near = [c for c in self.result["cells"] if c["status"] == "done" and not c["adaptive"]
                and c["draft"] == cell.draft and c["width"] == cell.width and c["depth"] < cell.depth]
        if best is None or not near:
            return None
        neighbour = max(near, key=lambda c: c["depth"])
        predicted = predict_ratio(neighbour, cell, self.profile)
        if predicted >= best * (1 - self.cfg.skip_margin):
            return None
        e = self._entry(cell)
        e.update(status="skipped", predicted_ratio=round(predicted, 4), skip_reason=(
            f"predicted {predicted:.2f}x plain decoding from {neighbour['id']}, below the best so far "
            f"{best:.2f}x by more than {self.cfg.skip_margin:.0%}"))
        return e

    def _measure(self, cell: Cell, ar: dict[str, dict[str, Any]]) -> dict[str, Any]:
        e = self._entry(cell)
        s = cell.settings(self.cfg)
        for p in self.prompts:
            r = self._decode(s, p.id)
            base = ar[p.id]
            e["per_prompt"].append({
                "prompt": p.id, "tok_s": r["tok_s"], "decode_tok_s": r["decode_tok_s"],
                "tokens_per_pass": r["tokens_per_pass"],
                "ratio_to_ar": (round(r["decode_tok_s"] / base["decode_tok_s"], 4)
                                if base["decode_tok_s"] else None),
                "new_tokens": r["new_tokens"], "wall_s": r["wall_s"],
                "identical_to_ar": r["tokens"] == base["tokens"]})
        pp = e["per_prompt"]
        e["tok_s"] = _median([x["tok_s"] for x in pp])
        e["decode_tok_s"] = _median([x["decode_tok_s"] for x in pp])
        e["tokens_per_pass"] = _median([x["tokens_per_pass"] for x in pp])
        e["ratio_to_ar"] = _median([x["ratio_to_ar"] for x in pp if x["ratio_to_ar"] is not None] or [0.0])
        return e
