"""The Race dock: two settings on one prompt, side by side, outputs growing live.

How the device is shared: the two take turns on the one device, window by window; whichever
has used less device time so far runs its next window (engine.tuning.race), so both always
have had about the same share. Each side's speeds count its own device time: decode tok/s
after its first window (the prefill excluded, as in the stats dock), tok/s with the prefill in.
The bar under each output is the run toward the finish line (the prompt's max tokens); the first
across wins.

The baseline line names plain decoding's decode speed as every view does (Baseline.label():
"plain decoding N tok/s (measured|probe)") and where it came from: the plain side (`plain`) when
there is one, else the sides' own plain steps, else the cost profile's one-row pass; each
speculating side's decode tok/s is quoted against it.

The line under the race is the exactness watch (engine.speculation.exactness): where one side
is plain greedy decoding (`plain`), the other side's tokens against it, "identical to plain
decoding" or where they first differ; otherwise why there is no check.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QLabel, QLineEdit, QPlainTextEdit, QProgressBar, QPushButton, QWidget

from engine.errors import SpecscopeError

from workbench import theme
from workbench.job_dock import JobDock
from workbench.jobs import race_job
from workbench.widgets import ElidedLabel, column, row
from workbench.worker import GeneratorWorker

SHARING = ("The two take turns on the one device, window by window: whichever has used less "
           "device time runs next, so both get an equal share. Speeds count each side's own time; "
           "decode tok/s leaves out the prefill (its first window), as the stats dock does.")


def speeds_text(u, base=None, base_side: int | None = None) -> str:
    """A lane's figures: decode tok/s (against the baseline, for a side it was not measured on),
    tok/s with the prefill in, tokens per pass, passes and device time."""
    if u.decode_tok_s is None:
        decode = "decode tok/s after the first window"
    else:
        decode = f"decode {u.decode_tok_s:.1f} tok/s"
        if base is not None and base_side != u.side:
            decode += f" ({u.decode_tok_s / base.tok_s:.2f}× plain decoding)"
    return (f"{decode} · {u.tok_s:.1f} tok/s incl. prefill · {u.tokens_per_pass:.2f} tokens/pass · "
            f"{u.event.stats.forward_passes} passes · {u.device_s[u.side]:.2f} s on the device")


def baseline_text(base, base_side: int | None) -> str:
    """The baseline line: Baseline.label() and where the figure comes from."""
    if base is None:
        return ("baseline: none yet (plain decoding's speed: enter plain on one side, or the "
                "sides' plain steps or a cost profile give it)")
    where = (f"lane {'AB'[base_side]}'s decode speed" if base_side is not None
             else "the sides' plain steps" if base.source == "measured"
             else "the cost profile's one-row pass")
    return f"baseline: {base.label()}, {where}"


class _Lane(QWidget):
    def __init__(self, name: str, spec: str):
        super().__init__()
        self.spec = QLineEdit(spec)
        self.spec.setToolTip("plain (plain decoding), DRAFT:DEPTH:WIDTH (tree:8:3, lookup:8:1) or "
                             "adaptive:DRAFT:DEPTH:WIDTH")
        self.output = QPlainTextEdit()
        self.output.setReadOnly(True)
        self.output.setFont(theme.mono_font(9.5))
        self.stats = QLabel("")
        self.stats.setObjectName("muted")
        self.stats.setWordWrap(True)
        self.last = None                   # the side's latest RaceUpdate
        self.line = QProgressBar()
        self.line.setFormat("%v / %m tokens")
        self.line.setMinimumWidth(80)
        column(self, row(QLabel(name), (self.spec, 1)), (self.output, 1), self.line, self.stats,
               margins=(0, 0, 0, 0))

    def reset(self, total: int) -> None:
        self.output.setPlainText("")
        self.stats.setText("")
        self.last = None
        self.line.setRange(0, max(1, total))
        self.line.setValue(0)
        self.line.setStyleSheet("")

    def show_update(self, u) -> None:
        if self.output.toPlainText() != u.text:
            self.output.setPlainText(u.text)
            self.output.verticalScrollBar().setValue(self.output.verticalScrollBar().maximum())
        self.line.setValue(min(u.new_tokens, self.line.maximum()))
        self.last = u

    def show_speeds(self, base, base_side: int | None) -> None:
        if self.last is not None:
            self.stats.setText(speeds_text(self.last, base, base_side))


class RaceDock(JobDock):
    finished = Signal(object)            # the race's report (None: stopped before it began)
    kind = "race"

    def __init__(self, worker: GeneratorWorker, context: Callable[[], tuple[Any, Any]],
                 base: Callable[[], tuple[Any, Any]], before_job: Callable[[], None], parent=None):
        """context() -> (RuntimeSpec, cost profile or None); base() -> (prompt, DecodeSettings
        whose sampling and length both sides use); before_job() frees the model."""
        super().__init__(worker, context, before_job, parent)
        self.base = base
        self.report: dict[str, Any] | None = None
        self.lanes = (_Lane("A", "plain"), _Lane("B", "adaptive:tree:16:3"))
        self.start_button = QPushButton("Start race")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.result = ElidedLabel("")      # a long verdict is cut (whole in its tooltip), never widens the dock
        self.exact = ElidedLabel("")       # the exactness watch's verdict
        self.exact.setObjectName("muted")
        self.baseline = ElidedLabel("")    # plain decoding's speed, named and sourced
        self.baseline.setObjectName("muted")
        note = QLabel(SHARING)
        note.setObjectName("muted")
        note.setWordWrap(True)
        column(self, row(self.start_button, self.stop_button, (self.result, 1)),
               (row((self.lanes[0], 1), (self.lanes[1], 1)), 1), self.baseline, self.exact, note)
        self._latest: dict[int, Any] = {}
        self._timer = QTimer(self)             # coalesce: at most ~20 redraws a second
        self._timer.setInterval(50)
        self._timer.timeout.connect(self._draw)
        self._enable()

    def set_entrants(self, a: str, b: str) -> None:
        self.lanes[0].spec.setText(a)
        self.lanes[1].spec.setText(b)

    def start(self) -> bool:
        from engine.tuning.grid import race_settings
        if self.running:
            return False
        try:
            prompt, base = self.base()
            a, b = (race_settings(lane.spec.text(), base) for lane in self.lanes)
        except SpecscopeError as e:
            self.error.emit(str(e))
            return False
        _, profile = self.context()
        for lane in self.lanes:
            lane.reset(base.max_new_tokens)
        self.report = None
        self._latest = {}
        self.baseline.setText("")
        self.result.setText("racing…")
        self._show_exact_plan(a, b)
        self.run_job(race_job(prompt, a, b, profile))
        if self.freed:                     # the live run made way: said here, not only in the status bar
            self.result.setText("racing… (the live run was stopped for it: Run starts it again)")
            self.result.setToolTip(self.freed)
        self._timer.start()
        return True

    def stop(self) -> None:
        self.cancel_job()

    def on_item(self, u) -> None:
        self._latest[u.side] = u

    def _draw(self) -> None:
        latest, self._latest = self._latest, {}
        for side, u in latest.items():
            self.lanes[side].show_update(u)
            if u.winner is not None:
                self._crown(u.winner)
        if latest:
            # the newest update's baseline, for both lanes (the other's ratio moves with it)
            newest = max(latest.values(), key=lambda u: sum(u.device_s))
            for lane in self.lanes:
                lane.show_speeds(newest.baseline, newest.baseline_side)
            self.baseline.setText(baseline_text(newest.baseline, newest.baseline_side))

    def _crown(self, winner: int) -> None:
        self.lanes[winner].line.setStyleSheet(f"QProgressBar::chunk {{ background: {theme.GREEN}; }}")
        self.result.setText(f"{'AB'[winner]} crossed the finish line first")

    def on_done(self, report) -> None:
        self._draw()
        self._timer.stop()
        self.report = report
        if report is None:
            self._set_exact("", None)
        else:
            self._show_exact(report)
            self._show_baseline(report)
        if report is None or report["winner"] is None:
            self.result.setText("stopped")
        else:
            s = report["sides"]
            self.result.setText(f"{'AB'[report['winner']]} won: A {s[0]['device_s']:.2f} s, "
                                f"B {s[1]['device_s']:.2f} s on the device for {s[0]['new_tokens']} "
                                f"and {s[1]['new_tokens']} tokens")
        self.finished.emit(report)

    def _show_baseline(self, report) -> None:
        """The race's final baseline (its report's), on the line and in both lanes' ratios."""
        from engine.cost.baseline import Baseline
        b = report.get("baseline")
        base = Baseline(b["tok_s"], b["source"]) if b else None
        for lane in self.lanes:
            lane.show_speeds(base, report.get("baseline_side"))
        self.baseline.setText(baseline_text(base, report.get("baseline_side")))

    def _show_exact_plan(self, a, b) -> None:
        from engine.speculation.exactness import reference_side
        ref, why = reference_side((a, b))
        self._set_exact(why if ref is None else
                        f"exactness: {'AB'[1 - ref]} is compared with plain decoding ({'AB'[ref]}) "
                        "when the race ends", None)

    def _set_exact(self, text: str, identical: bool | None) -> None:
        color = theme.MUTED if identical is None else theme.GREEN if identical else theme.RED
        self.exact.setStyleSheet(f"color: {color};")
        self.exact.setText(text)

    def _show_exact(self, report) -> None:
        v = report.get("check_exact")
        if v is None:
            self._set_exact(report.get("check_exact_why", ""), None)
            return
        ref = report["reference"]
        self._set_exact(f"exactness, {'AB'[1 - ref]} vs plain {'AB'[ref]}: {v['verdict']}",
                        v["identical"])

    def on_failed(self, message: str) -> None:
        self._timer.stop()
        self.result.setText("failed")
        self._set_exact("", None)
        self.finished.emit(None)

    def update_buttons(self) -> None:
        self._enable()

    def _enable(self) -> None:
        self.start_button.setEnabled(not self.running)
        self.stop_button.setEnabled(self.running)
