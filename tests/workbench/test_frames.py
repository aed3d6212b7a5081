"""Frame pacing (workbench.frames): no Qt, no model."""

from __future__ import annotations

from types import SimpleNamespace

from workbench.frames import FramePacer


def test_frame_pacer_spends_its_budget_and_starves_nothing():
    views = [SimpleNamespace(name=n, is_plot=n.startswith("plot")) for n in
             ("tree", "rows", "penalty", "output", "plot_roofline", "plot_top", "plot_bottom")]
    window_views, plots = views[:4], views[4:]
    p = FramePacer(views, cpu_budget=0.05, min_gap_s=0.033, max_gap_s=1.0, plots_hz=2.0)
    p.mark()
    assert p.take(0.0, streaming=False, split=False) == views            # idle: everything at once
    assert p.take(0.0, streaming=False, split=False) == []
    p.mark([views[1], views[5]])
    assert p.take(0.0, streaming=False, split=False) == [views[1], views[5]]   # only what was marked
    # streaming: a frame costing 10 ms of CPU buys 200 ms of quiet
    p.mark()
    assert p.due(0.0, streaming=True)
    p.started(0.0, 5.0)
    p.account(5.010)
    assert not p.due(0.199, streaming=True) and p.due(0.2001, streaming=True)
    p.started(1.0, 6.0)
    p.account(6.5)                                                       # a 500 ms frame: capped
    assert p.due(2.0, streaming=True) and not p.due(1.99, streaming=True)
    # the plots wait out their rate while streaming: right after one was drawn, none is offered
    p.mark()
    assert p.take(3.0, streaming=True, split=False) == views
    p.mark()
    assert p.take(3.1, streaming=True, split=False) == window_views
    # one slot per streaming frame: the window views together (so they agree on the window they
    # show), then one plot; a new window every frame still lets every plot through
    frames, t = [], 10.0
    for _ in range(24):
        p.mark()
        frames.append([v.name for v in p.take(t, streaming=True, split=True)])
        t += 0.3
    assert frames[0::2] == [[v.name for v in window_views]] * 12, frames
    plot_frames = [f for f in frames[1::2]]
    assert all(len(f) == 1 for f in plot_frames)
    assert sorted(sum(f.count(v.name) for f in plot_frames) for v in plots) == [4, 4, 4]   # in turns
