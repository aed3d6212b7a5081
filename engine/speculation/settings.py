"""Decode settings: one frozen, validated object shared by the CLI, the decoder and the workbench.

The workbench changes settings while a run goes on by sending `dataclasses.replace(settings,
depth=6)` through the decoder's control queue; the decoder applies it at the next window.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from engine.errors import ParameterError

if TYPE_CHECKING:
    from engine.speculation.sampling import SamplingConfig

DRAFTERS = ("none", "lookup", "tree")
MATCH_RULES = ("recent", "first", "frequent")


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
    # sampling (temperature 0 = greedy)
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_window: int = 64
    # length
    max_new_tokens: int = 256

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ParameterError(msg)

        if self.draft not in DRAFTERS:
            bad(f"--draft must be one of {', '.join(DRAFTERS)}, got {self.draft!r}")
        if self.match not in MATCH_RULES:
            bad(f"--match must be one of {', '.join(MATCH_RULES)}, got {self.match!r}")
        if not 1 <= self.depth <= 64:
            bad(f"--depth must be between 1 and 64, got {self.depth}")
        if not 1 <= self.width <= 16:
            bad(f"--width must be between 1 and 16, got {self.width}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            bad(f"n-gram sizes need 1 <= --ngram-min <= --ngram-max, got {self.ngram_min} and {self.ngram_max}")
        if self.ngram_max > 16:
            bad(f"--ngram-max must be at most 16, got {self.ngram_max}")
        # the sampling fields are validated once, by the sampler's own config; the message
        # names the command-line flag
        try:
            self.sampling()
        except ParameterError as e:
            field, _, rest = str(e).partition(" ")
            raise ParameterError(f"--{field.replace('_', '-')} {rest}") from None
        if self.max_new_tokens < 1:
            bad(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")

    def sampling(self) -> "SamplingConfig":
        """The sampler's view of these settings (validated on construction)."""
        from engine.speculation.sampling import SamplingConfig
        return SamplingConfig.from_settings(self)

    @property
    def greedy(self) -> bool:
        return self.sampling().greedy

    @property
    def penalized(self) -> bool:
        return self.sampling().penalized

    def to_dict(self) -> dict:
        return asdict(self)
