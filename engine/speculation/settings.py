"""Decode settings: one frozen, validated object shared by the CLI, the decoder and the workbench.

The sampler's parameters are one `SamplingConfig` inside the settings, validated once, there.
The workbench changes settings while a run goes on by sending `dataclasses.replace(settings,
depth=6)` (or `settings.with_sampling(top_p=0.9)`) through the decoder's control queue; the
decoder applies it at the next window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Mapping

from engine.errors import ParameterError
from engine.limits import MAX_ROWS
from engine.speculation.sampling import SamplingConfig

NGRAM_DRAFTERS = ("lookup", "tree")
# llama.cpp's own n-gram drafters (engine.speculation.llamacpp_ngram): size_n = --ngram-max,
# size_m = --depth
LLAMACPP_DRAFTERS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v")
MODEL_DRAFTERS = ("model", "early-exit")     # a draft model; the target's own first layers
DRAFTERS = ("none", *NGRAM_DRAFTERS, *MODEL_DRAFTERS, *LLAMACPP_DRAFTERS)
MATCH_RULES = ("recent", "first", "frequent")
SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingConfig))


@dataclass(frozen=True)
class DecodeSettings:
    # drafting
    draft: str = "tree"
    depth: int = 8
    width: int = 3
    ngram_min: int = 1
    ngram_max: int = 4
    match: str = "recent"
    adaptive: bool = False
    ar_floor: bool = False
    draft_model: str | None = None   # --draft model: a GGUF file or HF folder sharing the vocabulary
    exit_layer: int = 8              # --draft early-exit: the target's first K layers draft
    takeover: bool = False           # model drafts: the n-gram tree takes windows it prices cheaper
    # what each row's distribution is (temperature 0 = greedy), and the request's random stream
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int = 0
    # length
    max_new_tokens: int = 256

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ParameterError(msg)

        if self.draft not in DRAFTERS:
            bad(f"--draft must be one of {', '.join(DRAFTERS)}, got {self.draft!r}")
        if self.match not in MATCH_RULES:
            bad(f"--match must be one of {', '.join(MATCH_RULES)}, got {self.match!r}")
        if not 1 <= self.depth <= MAX_ROWS:
            bad(f"--depth must be between 1 and {MAX_ROWS}, got {self.depth}")
        if self.draft == "model" and not self.draft_model:
            bad("--draft model needs --draft-model PATH (a .gguf file or an HF folder)")
        if isinstance(self.exit_layer, bool) or not isinstance(self.exit_layer, int) \
                or not 1 <= self.exit_layer <= 256:
            bad(f"--exit-layer must be an integer between 1 and the model's layer count, "
                f"got {self.exit_layer!r}")
        if not 1 <= self.width <= 16:
            bad(f"--width must be between 1 and 16, got {self.width}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            bad(f"n-gram sizes need 1 <= --ngram-min <= --ngram-max, got {self.ngram_min} and {self.ngram_max}")
        if self.ngram_max > 16:
            bad(f"--ngram-max must be at most 16, got {self.ngram_max}")
        if not isinstance(self.sampling, SamplingConfig):
            bad(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}")
        if self.max_new_tokens < 1:
            bad(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2 ** 63:
            bad(f"--seed must be an integer in [0, 2**63), got {self.seed!r}")

    def with_sampling(self, **changes: Any) -> "DecodeSettings":
        """These settings with some sampler fields changed: `s.with_sampling(top_p=0.9)`."""
        return replace(self, sampling=replace(self.sampling, **changes))

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON: the sampler's fields nested under "sampling". A fresh dict
        each call, built once per settings object (every window's event carries one, and asdict's
        recursion is not free: BENCHMARKS.md, "Speculation and tuning timings (moved from code
        comments)")."""
        d = self.__dict__.get("_dict")
        if d is None:
            d = asdict(self)
            object.__setattr__(self, "_dict", d)     # frozen: a cache, not a field
        return {**d, "sampling": dict(d["sampling"])}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DecodeSettings":
        """Settings from `to_dict()`'s form. The flat form (the sampler's fields beside the
        others, as recordings made before the nesting store them) loads too; a flat sampler
        field overrides the nested one. Unknown keys are ignored."""
        own = {f.name for f in fields(cls)} - {"sampling"}
        nested = d.get("sampling") or {}
        sampling = {k: d[k] if k in d else nested[k] for k in SAMPLING_FIELDS if k in d or k in nested}
        return cls(sampling=SamplingConfig(**sampling), **{k: v for k, v in d.items() if k in own})


# What a user gets without choosing: the window's and the command line's defaults. A fixed
# depth 8 x width 3 n-gram tree behind the AR floor, which keeps timing the windows against plain
# steps (engine.cost.floor) and decodes plainly while speculating does not pay. Chosen by
# measurement (BENCHMARKS.md, "The user default, measured"): on the H200 it reached 0.97-1.05 of
# the best fixed cell on every category while adaptive windows with the floor reached 0.83-0.98.
# `--adaptive` prices each window on the device's cost profile instead. DecodeSettings() itself
# has the floor off: the library's explicit form, which tests and benchmarks pin.
USER_DEFAULTS = DecodeSettings(adaptive=False, ar_floor=True)

# The CPU's default differs (BENCHMARKS.md, "Answers that hold, measured (2026-12-04)"): there a
# 25-row window costs several plain steps, so the fixed tree's probe windows are not paid back on
# prompts that draft little, while adaptive windows priced on the CPU's profile stay small. The
# AR floor stays on: a busy desktop whose speed moves under the profile falls back to plain steps.
DEVICE_DEFAULTS = {"cpu": replace(USER_DEFAULTS, adaptive=True)}


def user_defaults(device_type: str | None = None) -> DecodeSettings:
    """What a user gets without choosing on a device of this type ("cpu", "cuda"; None: the
    GPU's, USER_DEFAULTS). ROCm devices are "cuda" to torch."""
    return DEVICE_DEFAULTS.get(device_type or "", USER_DEFAULTS)
