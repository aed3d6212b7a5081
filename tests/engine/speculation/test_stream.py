"""The stream a drafter drafts on (engine.speculation.stream): the target's session and its
early-exit view are both streams; a session is not a runtime, so a probe timed on a run's
session takes its device, model and dtype from the runtime, and leaves the committed text alone."""

from __future__ import annotations

import torch

from engine.cost.probe import run_probe
from engine.model.runtime import chain
from engine.speculation.stream import Stream, TargetStream

TEXT = "def area(w, h):\n    return w * h\n"


def test_a_session_and_its_early_exit_view_are_streams(cpu_runtime) -> None:
    session = cpu_runtime.session(64, spare=8)
    try:
        assert isinstance(session, TargetStream)
        view = session.first_layers(2)
        assert isinstance(view, Stream) and not isinstance(view, TargetStream)
        # no proxies of the runtime: identity is asked of the runtime itself
        for name in ("device_name", "model_id", "dtype_name", "config"):
            assert not hasattr(session, name), name
    finally:
        session.close()


def test_a_probe_on_a_runs_session_names_the_runtime_and_keeps_the_text(cpu_runtime) -> None:
    ids = cpu_runtime.tokenizer.encode(TEXT)
    session = cpu_runtime.session(len(ids) + 16, spare=8)
    try:
        session.prefill(ids[:-1])
        before = session.verify([ids[-1]], *chain(1)).logits.clone()
        prof = run_probe(cpu_runtime, context=session.length, rows=(1, 2), repeats=1, warmup=0,
                         exit_layers=[1], on=session)
        assert (prof.device, prof.model, prof.dtype) == (cpu_runtime.device_name,
                                                         cpu_runtime.model_id, "float32")
        assert [r for r, _ in prof.points] == [1, 2] and all(ms > 0 for _, ms in prof.points)
        assert set(prof.extra["exit_ms"]) == {"1"}
        assert session.length == len(ids) - 1          # the probe committed nothing
        after = session.verify([ids[-1]], *chain(1)).logits
        assert torch.equal(before, after)              # and the committed keys are the same
    finally:
        session.close()
