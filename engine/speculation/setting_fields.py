"""Every decode setting once: its command-line flag, its type, its help, and the range an input for
it offers. The command line (specscope.cli) builds its flags from this table and the window's
Controls panel (workbench.controls) its inputs, so a flag, a tooltip and a help line cannot drift
apart. The validation itself stays in DecodeSettings and SamplingConfig (their messages name the
flags given here); a range here is only what a spin box offers.

Plain data: no argparse, no Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from engine.errors import ParameterError
from engine.speculation.settings import DRAFTERS, MATCH_RULES, SAMPLING_FIELDS


@dataclass(frozen=True)
class SettingField:
    name: str                    # the DecodeSettings field (or SamplingConfig's: see `sampling`)
    flag: str                    # the command-line flag
    kind: type                   # int | float | str | bool (bool: --flag / --no-flag, a checkbox)
    group: str                   # drafting | sampling | penalties | length (the panel's boxes)
    help: str                    # --help, and the panel's tooltip
    label: str                   # the panel's label
    choices: tuple[str, ...] = ()
    lo: float = 0                # what a spin box offers (a value outside fails validation, inline)
    hi: float = 0
    step: float = 1.0
    decimals: int = 2
    metavar: str | None = None

    @property
    def sampling(self) -> bool:
        """A field of the sampler (DecodeSettings.sampling), not of the settings themselves."""
        return self.name in SAMPLING_FIELDS


F = SettingField
FIELDS: tuple[SettingField, ...] = (
    # drafting
    F("draft", "--draft", str, "drafting", "none: plain decoding; lookup: one prompt-lookup continuation; "
      "tree: the top n-gram matches as a token tree; model: a draft model (--draft-model); "
      "early-exit: the target's first --exit-layer layers", "drafter", choices=DRAFTERS),
    F("draft_model", "--draft-model", str, "drafting", "--draft model: a .gguf file or HF folder with the "
      "target's vocabulary (loaded on the target's device)", "draft model", metavar="PATH"),
    F("exit_layer", "--exit-layer", int, "drafting", "--draft early-exit: how many of the target's layers "
      "draft (their keys are shared with the target)", "exit layer", lo=1, hi=256, metavar="K"),
    F("takeover", "--takeover", bool, "drafting", "--draft model / early-exit: each window, the n-gram tree, "
      "the model or a plain step, whichever is expected to emit the most tokens per ms (measured on "
      "this device; the tree drafts to depth max(--depth, 8))", "takeover"),
    F("depth", "--depth", int, "drafting", "draft tokens per branch", "depth", lo=1, hi=64),
    F("width", "--width", int, "drafting", "branches of the tree drafter (model drafts: 1 is a chain, "
      "more a tree)", "width", lo=1, hi=16),
    F("ngram_min", "--ngram-min", int, "drafting", "shortest n-gram to look up", "n-gram", lo=1, hi=16),
    F("ngram_max", "--ngram-max", int, "drafting", "longest n-gram to look up (tried first)", "to",
      lo=1, hi=16),
    F("match", "--match", str, "drafting", "which earlier occurrence the lookup drafter copies", "match",
      choices=MATCH_RULES),
    F("adaptive", "--adaptive", bool, "drafting", "price every window on the device's cost profile and "
      "pick depth and width (model drafts: their draft passes priced on the same clock)", "adaptive"),
    F("ar_floor", "--ar-floor", bool, "drafting", "measure plain decoding and retire speculation when it "
      "is not cheaper", "AR floor"),
    # sampling
    F("temperature", "--temperature", float, "sampling", "softmax temperature; 0 = greedy", "temp.",
      lo=0.0, hi=10.0, step=0.05),
    F("seed", "--seed", int, "sampling", "seed of the sampling RNG (same seed, same tokens)", "seed",
      lo=0, hi=2**31 - 1),
    F("top_k", "--top-k", int, "sampling", "keep the k most likely tokens (0 = off)", "top-k", lo=0, hi=100000),
    F("top_p", "--top-p", float, "sampling", "nucleus: keep the smallest set with this mass (1 = off)",
      "top-p", lo=0.0, hi=1.0, step=0.05),
    F("min_p", "--min-p", float, "sampling", "drop tokens below min-p x the top probability (0 = off)",
      "min-p", lo=0.0, hi=1.0, step=0.01),
    # penalties
    F("repeat_penalty", "--repeat-penalty", float, "penalties", "divide positive logits of seen tokens "
      "(1 = off)", "repeat", lo=0.0, hi=5.0, step=0.05),
    F("presence_penalty", "--presence-penalty", float, "penalties", "subtract once per seen token (0 = off)",
      "presence", lo=-100.0, hi=100.0, step=0.1),
    F("frequency_penalty", "--frequency-penalty", float, "penalties", "subtract per occurrence (0 = off)",
      "freq.", lo=-100.0, hi=100.0, step=0.1),
    F("penalty_window", "--penalty-window", int, "penalties", "how many recent tokens the penalties see (W)",
      "window", lo=1, hi=100000),
    # length
    F("max_new_tokens", "--max-new-tokens", int, "length", "stop after this many new tokens", "max tokens",
      lo=1, hi=1_000_000),
)
BY_NAME: dict[str, SettingField] = {f.name: f for f in FIELDS}


def _show(f: SettingField, x: float) -> str:
    return f"{int(x):,}" if f.kind is int else f"{x:g}"


def check_ranges(d: Mapping[str, Any], where: str = "the settings") -> None:
    """Every number of a settings dict (DecodeSettings.to_dict's nested form or the older flat
    one) a number of its field's kind, finite, inside what the field's input offers (the window's
    spin boxes: a value past them would be clamped there without a word); ParameterError naming
    the field and its range otherwise. Files we read settings from (recordings, sweeps) pass here
    before DecodeSettings validates the combination."""
    nested = d.get("sampling")
    nested = nested if isinstance(nested, Mapping) else {}
    for f in FIELDS:
        if f.kind not in (int, float):
            continue
        values = ([d[f.name]] if f.name in d else []) + ([nested[f.name]] if f.sampling and f.name in nested else [])
        for v in values:
            number = isinstance(v, (int, float)) and not isinstance(v, bool) and (
                f.kind is float or isinstance(v, int))
            if not (number and math.isfinite(v) and f.lo <= v <= f.hi):
                shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
                raise ParameterError(f"{where}: {f.name} ({f.flag}) is {shown}, not "
                                     f"{'an integer' if f.kind is int else 'a number'} from "
                                     f"{_show(f, f.lo)} to {_show(f, f.hi)}")
