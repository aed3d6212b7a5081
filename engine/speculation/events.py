"""Frozen, plain-Python events the decoder yields: one per window.

Views, recordings (JSONL) and replays all use these objects, so they hold only ints, floats,
strings, bools, lists and dicts, never tensors. `to_dict` / `from_dict` round-trip through JSON.

A window: the root is the last committed token (row 0); every draft node is one more verify row
(row i+1 is node i). Node depth is 1-based (a child of the root has depth 1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Row outcomes
ROOT = "root"            # row 0: scores the token after the committed prefix
ACCEPTED = "accepted"    # a draft node the verifier accepted (on the accepted path)
REJECTED = "rejected"    # a draft node the verifier tested and rejected
NOT_REACHED = "not_reached"  # a node below a rejection, or a sibling never tried

# Emitted token kinds
FROM_DRAFT = "draft"         # an accepted draft node
BONUS = "bonus"              # the target's token after a fully accepted path (a leaf)
CORRECTION = "correction"    # the target's token replacing a rejected draft
TARGET = "target"            # a plain decode step (no draft this window)


@dataclass(frozen=True)
class PenaltyEntry:
    token: int
    text: str
    before: float   # logit before penalties
    after: float    # logit after penalties


@dataclass(frozen=True)
class PenaltyLedger:
    """What one verify row was penalized against: H_i and each penalized candidate."""

    history: list[int]          # the last W tokens the row saw (oldest first)
    n_draft: int                # how many of the last entries of history are draft-path tokens
    entries: list[PenaltyEntry]  # one per distinct history token
    flipped: bool = False       # the penalties changed this row's verdict (argmax / acceptance)


@dataclass(frozen=True)
class VerifyRow:
    row: int
    node: int                   # -1 for the root row
    depth: int                  # 0 for the root row
    draft_token: int | None     # the node's token (None for the root row)
    draft_text: str
    target_token: int           # the target's argmax (greedy) or the token drawn at this row
    target_text: str
    top: list[tuple[int, str, float]]  # the target's top-5 (token, text, prob) after penalties
    p: float | None             # target probability of the drafted token
    q: float | None             # draft probability (None: point-mass draft)
    accept_prob: float | None   # probability the verifier accepted it with (1/0 in greedy)
    outcome: str                # ROOT | ACCEPTED | REJECTED | NOT_REACHED
    near_tie: bool = False      # greedy row whose top-2 margin is within the runtime's tie margin
    penalty: PenaltyLedger | None = None


@dataclass(frozen=True)
class Provenance:
    match: int        # which match (rank among the drafter's continuations, 0 = best)
    position: int     # where in the token stream the continuation was copied from
    source: str       # "lookup" | "tree" | ...
    count: int = 1    # how often this continuation recurs in the context


@dataclass(frozen=True)
class WindowStats:
    new_tokens: int
    forward_passes: int
    tokens_per_pass: float
    proposed_draft_tokens: int
    accepted_draft_tokens: int
    accept_rate_by_depth: list[float]
    tok_s: float
    elapsed_s: float
    ar_floor: str = "off"        # "off" | "probing" | "speculating" | "retired"


@dataclass(frozen=True)
class WindowEvent:
    index: int
    committed_len: int           # tokens committed before this window (prompt + emitted)
    root_token: int
    root_text: str
    # the draft tree, node i = verify row i + 1
    tokens: list[int]
    texts: list[str]
    parents: list[int]           # -1 = the root
    depths: list[int]
    provenance: list[Provenance]
    rows: list[VerifyRow]
    accepted_path: list[int]     # node indices from the root downwards
    emitted: list[int]
    emitted_texts: list[str]
    emitted_kinds: list[str]     # FROM_DRAFT | BONUS | CORRECTION | TARGET
    propose_ms: float
    verify_ms: float
    commit_ms: float
    window_ms: float
    stats: WindowStats
    drafter: str
    depth: int                   # the depth / width this window was built with
    width: int
    greedy: bool
    predicted_ms: float | None = None
    reason: str = ""             # why the window has its shape, in words (engine.cost.plan)
    cause: str = ""              # the same as a engine.cost.plan.Cause value ("" in old recordings)
    figures: dict[str, Any] = field(default_factory=dict)   # the cause's figures
    finished: bool = False
    finish_reason: str = ""      # "eos" | "length" | "stopped" | ""
    settings: dict[str, Any] = field(default_factory=dict)
    notice: str = ""             # a one-time line for the status bar (a draft model's size warning)
    # the window's whole cycle, from the end of the window before it to its commit (what the AR
    # floor is told: window_ms plus the last event's yield, its consumer and the loop); None in
    # old recordings
    cycle_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WindowEvent":
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["provenance"] = [Provenance(**p) for p in d["provenance"]]
        rows = []
        for r in d["rows"]:
            r = dict(r)
            r["top"] = [tuple(t) for t in r["top"]]
            if r.get("penalty") is not None:
                pen = dict(r["penalty"])
                pen["entries"] = [PenaltyEntry(**e) for e in pen["entries"]]
                r["penalty"] = PenaltyLedger(**pen)
            rows.append(VerifyRow(**r))
        d["rows"] = rows
        d["stats"] = WindowStats(**d["stats"])
        return cls(**d)


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass(frozen=True)
class RunHeader:
    """What a run decodes: the settings, the model and device, the prompt (a recording's first
    line, with the card's cost profile when one priced the run)."""

    settings: dict[str, Any]
    model: str = ""
    device: str = ""
    dtype: str = ""
    weights: str = ""
    prompt: Any = None                   # the text, or a list of chat messages
    prompt_tokens: int = 0
    card_profile: dict[str, Any] | None = None
    activation_dtype: str | None = None  # what the matmuls compute in, where the writer knows it

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for optional in ("card_profile", "activation_dtype"):
            if d[optional] is None:
                del d[optional]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunHeader":
        """Unknown keys are ignored; missing ones take their defaults (older recordings)."""
        return cls(**{"settings": {}, **_known(cls, d)})


@dataclass(frozen=True)
class DraftReport:
    """A model drafter's part of the report: its draft passes, and the draft model's file."""

    draft_ms: float
    draft_ms_per_token: float | None
    draft_model: str | None = None       # --draft model only
    draft_load_s: float | None = None
    draft_weight_format: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items()
                if v is not None or k in ("draft_ms", "draft_ms_per_token")}


@dataclass(frozen=True)
class RunReport:
    """The run's report: `specscope generate --json` prints `to_dict()` (DESIGN.md's keys, in
    this order; a model drafter adds DraftReport's), a recording keeps it as its last line."""

    text: str
    tokens: list[int]
    new_tokens: int
    prompt_tokens: int
    windows: int
    forward_passes: int
    proposed_draft_tokens: int
    accepted_draft_tokens: int
    tokens_per_pass: float
    accept_rate_by_depth: list[float]
    tok_s: float
    wall_s: float
    load_s: float
    finish_reason: str
    retired: bool
    ar_windows: int
    ar_floor: str
    profile: str | None
    device: str
    dtype: str
    activation_dtype: str             # what the linear layers multiply in (bf16 on the int4 CPU path)
    weights: str
    weight_format: str
    weight_bytes: int
    model: str
    config: dict[str, Any]
    draft: DraftReport | None = None
    # prefill start .. the first new token, on wall_s's clock; the tokens that came with it
    first_token_s: float | None = None
    first_tokens: int = 0
    # decode speed, prefill excluded (engine.cost.baseline.decode_tok_s); None: nothing after
    # the first token to time. tok_s above keeps the prefill in.
    decode_tok_s: float | None = None
    # plain decoding's decode speed and where it comes from (engine.cost.baseline.Baseline.to_dict:
    # {"tok_s", "source": "measured" | "probe"}); None: the run has no plain-decoding figure
    baseline: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "draft"}
        d["tokens"], d["accept_rate_by_depth"] = list(self.tokens), list(self.accept_rate_by_depth)
        d["config"] = dict(self.config)
        d["baseline"] = dict(self.baseline) if self.baseline is not None else None
        if self.draft is not None:
            d.update(self.draft.to_dict())
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunReport":
        """Unknown keys are ignored (reports before first_token_s, decode_tok_s and baseline
        read them as None); the draft keys make the DraftReport."""
        kw = _known(cls, d)
        kw.pop("draft", None)
        kw.setdefault("activation_dtype", kw.get("dtype", ""))      # reports before it existed
        draft = (DraftReport(**_known(DraftReport, d)) if "draft_ms" in d else None)
        return cls(**kw, draft=draft)
