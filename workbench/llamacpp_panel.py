"""Target llama.cpp: pick its llama-bench, probe its pass cost by rows (or load a saved curve), see
its knee and break-even table, price the sweep's configurations on it and copy the command.

The probe runs llama-bench on a plain thread (engine.cost.llamacpp_bench: it only waits on a child
process); results reach the widgets through queued signals, on the main thread. Pricing replays
llama.cpp's drafters on the sweep's plain-decoding outputs (engine.tuning.llamacpp_price): no
model runs, so it needs no lock.

Like `specscope export --price-with`, pricing uses the profile's calibration of llama.cpp's own
speculative loop (engine.tuning.llamacpp_loop: what a drafted window and a drafted row cost beyond
llama-bench's pass) by default: loading a profile sets the +row box to its row cost. A row cost
typed in the box overrides the calibration (that row cost alone, no window cost), as
`--row-overhead` does; a profile without a calibration is priced on the pass alone.
"""

from __future__ import annotations

import os
import shlex
import threading
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QDoubleSpinBox, QFileDialog, QLabel, QLineEdit, QProgressBar,
                               QPushButton, QSizePolicy, QSpinBox, QWidget)

from engine.errors import SpecscopeError
from workbench.widgets import column, row


CALIBRATED = "calibrated on llama.cpp's loop"
UNCALIBRATED = "no calibration: roofline --engine llamacpp measures it"


def pricing_overheads(box: float, cal) -> tuple[float, float, str]:
    """(row overhead, window overhead, where they come from) for the +row box's value and the
    profile's LoopCalibration (or None): the calibration while the box shows its row cost."""
    if cal is not None and round(box, 2) == round(cal.row_overhead, 2):
        return cal.row_overhead, cal.window_overhead, (
            f"{CALIBRATED}: a drafted window +{cal.window_overhead:.2f}, a drafted row "
            f"+{cal.row_overhead:.2f} plain steps")
    if cal is None and box == 0:
        return 0.0, 0.0, UNCALIBRATED
    return box, 0.0, f"+row {box:.2f} plain steps set by hand (no window cost; the calibration not used)"


class _Bridge(QObject):
    progress = Signal(str, float)
    done = Signal(object)
    failed = Signal(str)


class LlamaCppPanel(QWidget):
    profile_ready = Signal(object)        # the llama.cpp CostProfile (for the roofline overlay)
    command_ready = Signal(str)           # the priced command (or the plain-decoding line)

    def __init__(self, sweep_result: Callable[[], dict[str, Any] | None],
                 model_path: Callable[[], str | None] = lambda: None, parent=None):
        super().__init__(parent)
        self.sweep_result, self.model_path = sweep_result, model_path
        self.profile = None
        self.calibration = None               # the profile's LoopCalibration, None without one
        self.pricing = None
        self.table_text = ""
        self._thread: threading.Thread | None = None
        self.bridge = _Bridge(self)
        self.bridge.progress.connect(self._on_progress)
        self.bridge.done.connect(self._on_probed)
        self.bridge.failed.connect(self._on_failed)

        self.binary = QLineEdit(os.environ.get("LLAMA_BENCH", ""))
        self.binary.setPlaceholderText("llama-bench of the llama.cpp you deploy")
        pick = QPushButton("…")
        pick.setToolTip("pick llama-bench")
        pick.clicked.connect(self._pick_binary)
        self.context = QSpinBox()
        self.context.setRange(0, 131072)
        self.context.setValue(1024)
        self.context.setToolTip("context depth llama-bench measures at (-d)")
        self.probe_button = QPushButton("Probe curve")
        self.probe_button.clicked.connect(self.probe)
        self.load_button = QPushButton("Load…")
        self.load_button.setToolTip("a saved llama.cpp profile or llama-bench -o json file")
        self.load_button.clicked.connect(self._load_dialog)
        self.overhead = self._overhead_box()
        self.price_button = QPushButton("Price sweep")
        self.price_button.clicked.connect(self.price)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setFormat("llama.cpp: no curve yet")
        self.bar.setValue(0)                  # at -1 (no value yet) the bar hides its text
        self.summary = QLabel("")             # one line; the break-even table in its tooltip
        self.summary.setObjectName("muted")
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.answer = QLabel("")              # the priced configuration and its predicted gain
        self.answer.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.source = QLabel("")              # where the row and window costs come from
        self.source.setObjectName("muted")
        self.source.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.command = QLineEdit("")
        self.command.setReadOnly(True)
        self.command.setPlaceholderText("the llama-server command priced on llama.cpp's curve")
        self.copy_button = QPushButton("Copy")
        self.copy_button.clicked.connect(self.copy)
        # short lines: the panel shares the sweep dock's width, which a 1024-pixel window keeps
        # near 300 pixels
        column(self, row(QLabel("llama-bench"), (self.binary, 1), pick, self.probe_button),
               row(QLabel("depth"), self.context, 1, self.load_button),
               self.bar, self.summary,
               row((self.answer, 1), QLabel("+row"), self.overhead, self.price_button),
               self.source,
               row((self.command, 1), self.copy_button), 1)      # the lines at the top, not spread
        self._enable()

    def _overhead_box(self) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setRange(0.0, 9.99)
        box.setSingleStep(0.05)
        box.setDecimals(2)
        box.setToolTip("what each drafted row costs beyond llama-bench's pass, in plain steps: the "
                       "profile's calibration of llama.cpp's loop when it has one (with its window "
                       "cost); a value typed here overrides it (0 trusts the curve)")
        box.valueChanged.connect(self._show_source)
        return box

    # ---- the curve ------------------------------------------------------------------------
    def _pick_binary(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "llama-bench", self.binary.text(), "llama-bench (llama-bench*);;All files (*)")
        if path:
            self.binary.setText(path)

    def probe(self) -> bool:
        """Run llama-bench on a thread; False (and one line in the bar) when it cannot start."""
        from engine.cost.llamacpp_bench import bench_command, find_llama_bench
        from engine.io.load import default_model_path
        if self._thread is not None and self._thread.is_alive():
            return False
        try:
            binary = find_llama_bench(self.binary.text().strip() or None)
            model = self.model_path() or str(default_model_path())
            cmd = bench_command(binary, model, self.context.value())
        except SpecscopeError as e:
            self._on_failed(str(e))
            return False
        self.bar.setValue(0)
        self.bar.setFormat("llama-bench: starting…")
        self._thread = threading.Thread(target=self._probe_thread, args=(cmd,), daemon=True)
        self._thread.start()
        self._enable()
        return True

    def _probe_thread(self, cmd: list[str]) -> None:
        from engine.cost.llamacpp_bench import profile_from_llama_bench, run_llama_bench
        try:
            records = run_llama_bench(cmd, progress=lambda m, f: self.bridge.progress.emit(m, -1.0 if f is None else f))
            self.bridge.done.emit(profile_from_llama_bench(records, int(cmd[cmd.index("-d") + 1]),
                                                           command=cmd, source=shlex.join(cmd)))
        except SpecscopeError as e:
            self.bridge.failed.emit(str(e))
        except Exception as e:                     # a bug must not die silently on a thread
            self.bridge.failed.emit(f"llama-bench probe failed: {type(e).__name__}: {e}")

    def wait(self, timeout_s: float = 120.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def load(self, path: str | Path) -> bool:
        from engine.cost.llamacpp_bench import load_llama_bench_json
        try:
            self.set_profile(load_llama_bench_json(path))
        except SpecscopeError as e:
            self._on_failed(str(e))
            return False
        return True

    def _load_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "llama.cpp curve", "", "JSON (*.json)")
        if path:
            self.load(path)

    def set_profile(self, profile) -> None:
        from engine.cost.llamacpp_bench import llamacpp_label
        from engine.cost.profile import format_break_even
        from engine.tuning.llamacpp_loop import profile_calibration
        self.calibration = profile_calibration(profile)    # (a malformed one: a SpecscopeError)
        self.profile = profile
        self.overhead.setValue(self.calibration.row_overhead if self.calibration else 0.0)
        self._show_source()
        f = profile.fit
        knee = f"knee ≈ {f.knee_rows:.0f} rows" if f.knee_rows and f.knee_rows > 2 else "no flat part"
        self.summary.setText(f"{llamacpp_label(profile)}, depth {profile.context}: 1 row "
                             f"{f.one_row_ms:.2f} ms ({1000 / f.one_row_ms:.0f} tok/s), 16 rows "
                             f"{profile.ms(16) / f.one_row_ms:.2f}x, {knee}")
        # the break-even table: the summary's tooltip (the dock has no room for it)
        self.table_text = format_break_even(profile)       # what `roofline --engine llamacpp` prints
        self.summary.setToolTip(f"{profile.device}<br>tokens a window must emit to beat plain "
                                f"decoding on llama.cpp:<pre>{self.table_text}</pre>")
        self.bar.setValue(1000)
        self.bar.setFormat("llama.cpp curve ready")
        self.profile_ready.emit(profile)
        self._enable()

    # ---- pricing --------------------------------------------------------------------------
    def price(self) -> bool:
        """Price the sweep's acceptance on llama.cpp's curve; the command (or the plain line)."""
        from engine.tuning.llamacpp_export import NO_GAIN, command
        from engine.tuning.llamacpp_price import price_sweep
        res = self.sweep_result()
        if self.profile is None or not res or not res.get("ar"):
            self._on_failed("price needs a llama.cpp curve and a sweep with its plain runs done")
            return False
        try:
            row_cost, window_cost, source = pricing_overheads(self.overhead.value(), self.calibration)
            p = self.pricing = price_sweep(res, self.profile, row_overhead=row_cost,
                                           window_overhead=window_cost)
        except SpecscopeError as e:
            self._on_failed(str(e))
            return False
        if p.chosen is None:
            best = p.ranked[0] if p.ranked else None
            text = NO_GAIN
            why = (f"best: {best.config.id} at {best.ratio:.2f}x plain" if best else "nothing to price")
        else:
            model = str((res.get("model") or {}).get("source") or "MODEL.gguf")
            text = shlex.join(command(model, p.chosen.config))
            why = (f"{p.chosen.config.id}: {p.chosen.tok_s:.1f} tok/s predicted against plain "
                   f"{p.plain_tok_s:.1f} ({p.chosen.ratio:.2f}x)")
        self.command.setText(text)
        self.command.setCursorPosition(0)
        self.answer.setText(why)
        self.answer.setToolTip(f"{why}; on llama.cpp's curve, acceptance replayed from the sweep's "
                               f"plain runs on {p.prompts} prompts; {source}")
        self.bar.setFormat("priced")
        self.command_ready.emit(text)
        self._enable()
        return True

    def _show_source(self) -> None:
        if self.profile is None:
            return
        text = pricing_overheads(self.overhead.value(), self.calibration)[2]
        self.source.setText(text)
        self.source.setToolTip(text)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.command.text())

    # ---- from the thread -------------------------------------------------------------------
    def _on_progress(self, message: str, frac: float) -> None:
        if frac >= 0:
            self.bar.setValue(int(1000 * frac))
        self.bar.setFormat(message)

    def _on_probed(self, profile) -> None:
        self.set_profile(profile)

    def _on_failed(self, message: str) -> None:
        self.bar.setValue(0)
        self.bar.setFormat(message.splitlines()[0][:200])
        self.bar.setToolTip(message)
        self._enable()

    def _enable(self) -> None:
        busy = self._thread is not None and self._thread.is_alive()
        self.probe_button.setEnabled(not busy)
        self.price_button.setEnabled(self.profile is not None)
        self.copy_button.setEnabled(bool(self.command.text()))
