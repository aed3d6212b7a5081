"""The sweep's grid: its configuration, its cells, and the settings each cell decodes with.

A cell is (drafter, depth, width), written `DRAFT:DEPTH:WIDTH` (`tree:8:3`, `lookup:8:1`). The
lookup drafter has one branch, so only width 1 is a lookup cell; widths apply to the tree. The
adaptive row has one cell per drafter, `adaptive:DRAFT:DEPTH:WIDTH`: the cost model picks depth
and width per window up to those caps, with the AR floor on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import ParameterError
from engine.limits import MAX_ROWS
from engine.speculation.drafters import tree_rows
from engine.speculation.settings import LLAMACPP_DRAFTERS, MATCH_RULES, DecodeSettings

# llama.cpp's drafters sweep as chains: depth is their size_m, --ngram-max their size_n
SWEEP_DRAFTS = ("lookup", "tree", *LLAMACPP_DRAFTERS)
DEFAULT_DRAFTS = ("lookup", "tree")


@dataclass(frozen=True)
class SweepConfig:
    workload: str = "code-edit"        # engine.io.workloads: code-edit, specbench[:CATS], a .jsonl
    drafts: tuple[str, ...] = DEFAULT_DRAFTS
    depths: tuple[int, ...] = (2, 4, 8, 16)
    widths: tuple[int, ...] = (1, 2, 3)
    prompts: int | None = None         # keep the first N prompts of the workload
    per_category: int = 1              # Spec-Bench questions per category
    new_tokens: int = 128
    match: str = "recent"
    ngram_min: int = 1
    ngram_max: int = 4
    adaptive: bool = True              # the adaptive row (one cell per drafter)
    skip_margin: float = 0.5           # skip a cell predicted below best * (1 - margin); 0: never
    warmup_tokens: int = 8             # one untimed run first (0: none)

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ParameterError(msg)
        if not self.drafts or any(d not in SWEEP_DRAFTS for d in self.drafts):
            bad(f"--drafts takes a comma-separated list of {', '.join(SWEEP_DRAFTS)}; got "
                f"{','.join(self.drafts) or 'nothing'}")
        if not self.depths or any(not 1 <= d <= MAX_ROWS for d in self.depths):
            bad(f"--depths must be between 1 and {MAX_ROWS}; got {','.join(map(str, self.depths)) or 'nothing'}")
        if not self.widths or any(not 1 <= w <= 16 for w in self.widths):
            bad(f"--widths must be between 1 and 16; got {','.join(map(str, self.widths)) or 'nothing'}")
        if self.new_tokens < 1:
            bad(f"--new-tokens must be >= 1, got {self.new_tokens}")
        if self.prompts is not None and self.prompts < 1:
            bad(f"--prompts must be >= 1, got {self.prompts}")
        if self.per_category < 1:
            bad(f"--per-category must be >= 1, got {self.per_category}")
        if self.match not in MATCH_RULES:
            bad(f"--match must be one of {', '.join(MATCH_RULES)}, got {self.match!r}")
        if not 0.0 <= self.skip_margin < 1.0:
            bad(f"--skip-margin must be in [0, 1), got {self.skip_margin}")
        DecodeSettings(ngram_min=self.ngram_min, ngram_max=self.ngram_max)   # their own checks

    def identity(self) -> dict[str, Any]:
        """What two sweeps must share for one to resume the other (the grid may grow)."""
        return {"workload": self.workload, "prompts": self.prompts,
                "per_category": self.per_category, "new_tokens": self.new_tokens,
                "match": self.match, "ngram_min": self.ngram_min, "ngram_max": self.ngram_max}

    def to_dict(self) -> dict[str, Any]:
        return {**self.identity(), "drafts": list(self.drafts), "depths": list(self.depths),
                "widths": list(self.widths), "adaptive": self.adaptive,
                "skip_margin": self.skip_margin, "warmup_tokens": self.warmup_tokens}


@dataclass(frozen=True, order=True)
class Cell:
    draft: str
    depth: int
    width: int
    adaptive: bool = field(default=False)

    @property
    def id(self) -> str:
        base = f"{self.draft}:{self.depth}:{self.width}"
        return f"adaptive:{base}" if self.adaptive else base

    @property
    def rows(self) -> int:
        """Verify rows of one full window (adaptive: of its largest)."""
        return tree_rows(self.depth, self.width) if self.draft == "tree" else 1 + self.depth

    def settings(self, cfg: SweepConfig) -> DecodeSettings:
        return DecodeSettings(draft=self.draft, depth=self.depth, width=self.width,
                              ngram_min=cfg.ngram_min, ngram_max=cfg.ngram_max, match=cfg.match,
                              adaptive=self.adaptive, ar_floor=self.adaptive,
                              max_new_tokens=cfg.new_tokens)


def ar_settings(cfg: SweepConfig) -> DecodeSettings:
    return DecodeSettings(draft="none", max_new_tokens=cfg.new_tokens)


def plan_cells(cfg: SweepConfig) -> list[Cell]:
    """Every cell, grouped by (drafter, width) with depths rising, so a cell's shallower
    neighbour has run before it (the skip rule predicts from it); the adaptive row last."""
    depths = sorted(set(cfg.depths))
    cells = []
    for draft in cfg.drafts:
        for w in (1,) if draft != "tree" else sorted(set(cfg.widths)):
            cells += [Cell(draft, d, w) for d in depths]
    if cfg.adaptive:
        cells += [Cell(d, depths[-1], max(cfg.widths) if d == "tree" else 1, adaptive=True)
                  for d in cfg.drafts]
    return cells


def parse_cell(text: str) -> Cell:
    """`DRAFT:DEPTH:WIDTH` or `adaptive:DRAFT:DEPTH:WIDTH` -> Cell (ParameterError otherwise)."""
    parts = text.strip().split(":")
    adaptive = bool(parts) and parts[0] == "adaptive"
    if adaptive:
        parts = parts[1:]
    try:
        draft, depth, width = parts[0], int(parts[1]), int(parts[2])
        if len(parts) != 3 or draft not in SWEEP_DRAFTS:
            raise ValueError
    except (ValueError, IndexError):
        raise ParameterError(f"a cell is best or DRAFT:DEPTH:WIDTH with DRAFT one of "
                             f"{', '.join(SWEEP_DRAFTS)} (e.g. tree:8:3); got {text!r}") from None
    return Cell(draft, depth, width, adaptive)


def parse_ints(flag: str, text: str) -> tuple[int, ...]:
    """`2,4,8` -> (2, 4, 8); one clear line for anything else."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ParameterError(f"{flag} takes comma-separated integers (e.g. 2,4,8), got {text!r}") from None
    if not out:
        raise ParameterError(f"{flag} takes comma-separated integers (e.g. 2,4,8), got nothing")
    return out


DRAFTING_FIELDS = ("draft", "depth", "width", "ngram_min", "ngram_max", "match", "adaptive", "ar_floor")


def with_cell(base: DecodeSettings, cell_settings: dict[str, Any]) -> DecodeSettings:
    """`base` (its sampling, seed and length kept) with a cell's drafting settings."""
    return replace(base, **{k: cell_settings[k] for k in DRAFTING_FIELDS if k in cell_settings})


def race_settings(spec: str, base: DecodeSettings) -> DecodeSettings:
    """A race entrant: `plain` (plain decoding; `ar` and `none` name it too) or a cell id, on
    `base`'s sampling and length."""
    if spec.strip() in ("plain", "ar", "none"):
        return replace(base, draft="none", adaptive=False, ar_floor=False)
    cell = parse_cell(spec)
    s = cell.settings(SweepConfig(ngram_min=base.ngram_min, ngram_max=base.ngram_max, match=base.match))
    return with_cell(base, s.to_dict())
