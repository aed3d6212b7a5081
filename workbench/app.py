"""`specscope` with no subcommand: the workbench window, or an offscreen session.

    specscope                                   open the window, start a run on the default prompt
    specscope --screenshot F.png --windows N    run N windows offscreen, save the window as PNG
    specscope --size 1280x720                   the window at that size (with --screenshot too)
    specscope --replay session.jsonl            browse a recording (no model needed)

With no display ($DISPLAY and $WAYLAND_DISPLAY unset and no QT_QPA_PLATFORM chosen) the same
session runs offscreen: the window is saved as a PNG and the run's JSON report printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from engine.errors import one_line

OFFSCREEN_SHOT = "specscope-screenshot.png"


def display_available(env: dict | None = None) -> bool:
    """False on Linux/BSD with neither an X11 nor a Wayland display and no platform chosen."""
    env = os.environ if env is None else env
    if sys.platform in ("win32", "darwin"):
        return True
    if env.get("QT_QPA_PLATFORM"):
        return env["QT_QPA_PLATFORM"].split(":")[0] not in ("offscreen", "minimal")
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def window_settings(args: argparse.Namespace):
    """The settings the window starts with: the window's draft options (--draft, --draft-model,
    --exit-layer, --depth, --temperature), the user's defaults for the rest (adaptive windows
    priced on the card, with the AR floor: model drafts are priced too). A model drafter starts
    as a chain (width 1), as the controls switch to one."""
    from dataclasses import replace

    from engine.speculation.settings import MODEL_DRAFTERS, user_defaults
    from engine.model.device import device_type
    d = user_defaults(device_type(getattr(args, "device", None) or "auto"))
    draft = getattr(args, "gui_draft", d.draft)
    s = replace(d, draft=draft, width=1 if draft in MODEL_DRAFTERS else d.width,
                draft_model=getattr(args, "gui_draft_model", None),
                exit_layer=getattr(args, "gui_exit_layer", d.exit_layer),
                depth=getattr(args, "gui_depth", d.depth))
    return s.with_sampling(temperature=getattr(args, "gui_temperature", 0.0))


def _session_kind(args: argparse.Namespace) -> tuple[str | None, int | None, bool] | int:
    """(screenshot path, windows, print the report) for this session, offscreen with no display;
    or 2 where the window cannot open (the Qt platform libraries it lacks, all named)."""
    shot = args.screenshot
    windows = args.windows if args.windows and args.windows > 0 else None
    print_report = False
    if not shot and not display_available():
        if not os.environ.get("QT_QPA_PLATFORM"):
            print("specscope: no display ($DISPLAY and $WAYLAND_DISPLAY are unset): running the "
                  f"session offscreen; the window is saved to {OFFSCREEN_SHOT} and the report printed",
                  file=sys.stderr)
        shot, windows, print_report = OFFSCREEN_SHOT, None, True
    if shot:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    else:                       # Qt aborts naming only the first library it lacks: name them all
        from workbench.qt_libs import check_platform_libraries
        missing = check_platform_libraries()
        if missing:
            print(missing, file=sys.stderr)
            return 2
    return shot, windows, print_report


def _application(args: argparse.Namespace):
    """The QApplication, themed, with the threads --threads asks for (else a core left for the UI)."""
    from PySide6.QtWidgets import QApplication

    from engine.model.device import leave_a_core_for_the_ui
    from workbench import theme

    if getattr(args, "threads", None):
        import torch
        torch.set_num_threads(args.threads)
    else:
        leave_a_core_for_the_ui()
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "specscope"])
    app.setApplicationName("specscope")
    theme.apply_theme(app)
    return app


def _checked_inputs(args: argparse.Namespace):
    """(prompt, settings): the model, the prompt file and the recording checked before any window
    opens, so a wrong one is one line on stderr (SpecscopeError), not a window that fails."""
    from engine.io.prompts import read_prompt_file
    from workbench.recording import load_recording

    prompt = None
    if not args.replay:
        from engine.io.load import check_model
        check_model(args.model)
    if args.gui_prompt_file:
        prompt = read_prompt_file(args.gui_prompt_file)
    if args.replay:             # its reason on stderr too, not only in the window's banner
        load_recording(args.replay)
    return prompt, window_settings(args)


def main(args: argparse.Namespace) -> int:
    """The window, from the options `specscope.cli` parsed (the one parser of the command)."""
    session = _session_kind(args)
    if isinstance(session, int):
        return session
    shot, windows, print_report = session

    from engine.errors import SpecscopeError
    from workbench.host import RuntimeSpec
    from workbench.window import MainWindow

    app = _application(args)
    try:
        prompt, settings = _checked_inputs(args)
    except SpecscopeError as e:
        print(f"specscope: error: {one_line(e)}", file=sys.stderr)
        return 2
    win = MainWindow(RuntimeSpec(args.model, args.device, args.dtype, args.weights), prompt,
                     settings=settings, probe=not args.no_probe)
    if getattr(args, "size", None):
        win.resize(*args.size)
    if shot:
        return run_offscreen(app, win, shot, windows, args.replay, print_report)
    # what the window's banner says of a failed run, the terminal hears too
    win.run.failed.connect(lambda message, kind: print(f"specscope: error: {one_line(message)}",
                                                            file=sys.stderr))
    win.show()
    if args.replay:
        win.open_recording(args.replay)
    else:
        win.start_run()
    code = app.exec()
    return 2 if code == 0 and win.model_failed else code


def run_offscreen(app, win, path: str, windows: int | None, replay: str | None = None,
                  print_report: bool = False) -> int:
    """Run (or replay) offscreen, save the window as PNG; exit 0, 2 (user error) or 1."""
    from PySide6.QtCore import QEventLoop

    win.show()
    if replay:
        ok = win.open_recording(replay)
    else:
        loop = QEventLoop()
        win.run.finished.connect(loop.quit)
        win.run.failed.connect(loop.quit)
        ok = win.start_run(max_windows=windows)
        if ok:
            loop.exec()
    app.processEvents()
    win.render_all()
    app.processEvents()
    out = Path(path)
    win.grab().save(str(out))
    print(f"specscope: saved {out} ({len(win.store)} windows)", file=sys.stderr)
    if print_report and win.last_report is not None:
        print(json.dumps(win.last_report, ensure_ascii=False))
    code = 0
    if win.last_error is not None:
        message, kind = win.last_error
        print(f"specscope: error: {one_line(message)}", file=sys.stderr)
        code = 2 if kind in ("model", "parameter") else 1
    elif not ok:
        code = 2
    win.close()
    return code
