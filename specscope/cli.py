"""`specscope` command line: the workbench (no subcommand), generate, roofline, bench, sweep, export,
lesson, doctor.

Errors a user can fix (engine.errors.SpecscopeError) print one line and exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from typing import NoReturn, Sequence

from engine.errors import SpecscopeError, one_line
from engine.speculation.settings import USER_DEFAULTS, DecodeSettings
from specscope.bench import add_bench_args
from specscope.lesson_cmd import add_lesson_args, run_lesson_cmd
from specscope.doctor import add_doctor_args
from specscope.progress import Progress
from specscope.roofline import add_roofline_args, run_roofline
from specscope.roofline_llamacpp import add_llamacpp_args
from specscope.sweep_cmd import add_export_args, add_sweep_args


COMMON_DEFAULTS = {"model": None, "device": "auto", "dtype": "auto", "weights": "auto"}
# commands that decode or time our passes with torch's threads as the window's (sweep and bench
# have a --threads of their own; roofline's is llama-bench's)
THREADED = ("generate", "roofline", "lesson")


def add_model_args(p: argparse.ArgumentParser, top: bool = True) -> None:
    """--model/--device/--dtype/--weights. They are accepted before or after the subcommand; on a
    subcommand they default to SUPPRESS, so a value given before it is never overwritten."""
    def dflt(key):
        return COMMON_DEFAULTS[key] if top else argparse.SUPPRESS
    p.add_argument("--model", default=dflt("model"),
                   help="a .gguf file or an HF folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--device", default=dflt("device"), choices=["auto", "cpu", "cuda"],
                   help="auto: the GPU torch sees (CUDA or ROCm), else the CPU")
    p.add_argument("--dtype", default=dflt("dtype"), choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto: float32 on CPU, bfloat16 on GPU")
    p.add_argument("--weights", default=dflt("weights"), choices=["auto", "packed", "dequantized"],
                   help="quantized GGUF weights: packed (kept as in the file, computed on the fly) or "
                        "dequantized to --dtype at load; auto: packed on a GPU, and on an AVX-512 CPU "
                        "when every linear weight is Q4_0/Q4_1/Q4_K (int4 kernels, bfloat16 "
                        "activations), else dequantized")


def _add_setting(g, f, default, dest: str | None = None, note: str = "") -> None:
    """One flag from its row of engine.speculation.setting_fields (the Controls panel's inputs
    come from the same rows, so the two keep one name, type and help)."""
    extra = {"dest": dest} if dest else {}
    if f.kind is bool:
        g.add_argument(f.flag, action=argparse.BooleanOptionalAction, default=default, help=f.help + note, **extra)
    else:
        # the metavar from the flag, never from `dest` (the window's gui_ names are internal)
        metavar = f.metavar or (None if f.choices else f.flag.lstrip("-").upper().replace("-", "_"))
        g.add_argument(f.flag, type=None if f.kind is str else f.kind, default=default,
                       choices=f.choices or None, metavar=metavar, help=f.help + note, **extra)


def add_decode_args(p: argparse.ArgumentParser) -> None:
    from engine.speculation.setting_fields import FIELDS
    d = USER_DEFAULTS              # a fixed tree behind the AR floor: --adaptive to price windows
    by_device = device_dependent_fields()   # left None here, resolved for the device in settings_from_args
    g = p.add_argument_group("prompt")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="raw text to continue (no chat template)")
    src.add_argument("--prompt-file", help=".txt: raw text; .json: chat messages (chat template)")
    groups = {"drafting": p.add_argument_group("drafting"), "sampling": p.add_argument_group("sampling")}
    for f in FIELDS:
        _add_setting(groups["drafting" if f.group == "drafting" else "sampling"], f,
                     None if f.name in by_device else getattr(d.sampling if f.sampling else d, f.name),
                     note=_device_default_note(f.name) if f.name in by_device else "")


def _device_default_note(name: str) -> str:
    from engine.speculation.settings import DEVICE_DEFAULTS
    def word(v) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)
    per = [f"{word(getattr(v, name))} on a {kind.upper()}" for kind, v in DEVICE_DEFAULTS.items()]
    return f" (default: {', '.join(per)}, {word(getattr(USER_DEFAULTS, name))} on a GPU)"


def add_window_draft_args(w) -> None:
    """The drafter the window starts with (`generate` has its own --draft ...: these keep
    gui_ names so a value given before a subcommand never reaches it)."""
    from engine.speculation.setting_fields import BY_NAME
    d = DecodeSettings()
    for name in ("draft", "draft_model", "exit_layer", "depth", "temperature"):
        default = 0.0 if name == "temperature" else getattr(d, name)
        _add_setting(w, BY_NAME[name], default, dest=f"gui_{name}")


def positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return n


def window_size(text: str) -> tuple[int, int]:
    """'1280x720' -> (1280, 720), for --size."""
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 1280x720") from None
    if not (320 <= w <= 10000 and 240 <= h <= 10000):
        raise argparse.ArgumentTypeError(f"{w}x{h} is outside 320x240 .. 10000x10000")
    return w, h


def device_dependent_fields() -> set[str]:
    """The settings whose default depends on the device (engine.speculation.settings
    DEVICE_DEFAULTS): their flags default to None and settings_from_args fills them in."""
    from dataclasses import fields
    from engine.speculation.settings import DEVICE_DEFAULTS
    return {f.name for f in fields(DecodeSettings)
            if any(getattr(v, f.name) != getattr(USER_DEFAULTS, f.name) for v in DEVICE_DEFAULTS.values())}


def settings_from_args(a: argparse.Namespace) -> DecodeSettings:
    # every decode flag's dest is the name of its settings field (--top-p -> top_p, a sampler
    # field); from_dict takes the flat form and ignores the other options. A flag left at None
    # (a device-dependent default the user did not give) takes the device's default.
    from engine.model.device import device_type
    from engine.speculation.settings import user_defaults
    flat = dict(vars(a))
    unset = [k for k in device_dependent_fields() if flat.get(k) is None]
    if unset:
        dflt = user_defaults(device_type(flat.get("device") or "auto"))
        flat.update({k: getattr(dflt, k) for k in unset})
    return DecodeSettings.from_dict(flat)


def prompt_from_args(a: argparse.Namespace):
    from engine.io.prompts import default_prompt, read_prompt_file
    if a.prompt is not None:
        return a.prompt
    path = a.prompt_file or getattr(a, "gui_prompt_file", None)   # before or after `generate`
    if path:
        return read_prompt_file(path)
    return default_prompt()


def cmd_generate(a: argparse.Namespace) -> int:
    settings = settings_from_args(a)          # validate before the slow load
    prompt = prompt_from_args(a)
    if a.check_exact:
        from engine.speculation.exactness import require_greedy
        require_greedy(settings)
    from engine.speculation.decoder import Decoder
    from engine.io.prompts import encode_prompt
    from engine.session import draft_opener, open_runtime

    quiet = a.json
    rt = open_runtime(a.model, a.device, a.dtype, progress=None if quiet else Progress(),
                      weights=a.weights)
    ids = encode_prompt(rt.tokenizer, prompt)
    dec = Decoder(rt, ids, settings, detail=False,    # a bad draft model fails here, before a probe
                  open_model=draft_opener(rt, weights=a.weights),
                  progress=Progress())        # a draft model's first run probes its cost too
    profile, probe_s = _cost_profile(rt, settings)
    if profile is not None:
        dec.use_profile(profile)              # timed apart from the run (probe_s)
    if dec.notice:                            # e.g. a draft model larger than the target
        print(f"specscope: {dec.notice}", file=sys.stderr)
    if quiet:
        report = dec.run()
        report["probe_s"] = probe_s
        verdict = _check_exact(a, rt, ids, settings, report["tokens"], quiet)
        if verdict is not None:
            report["check_exact"] = verdict.to_dict()
        print(json.dumps(report, ensure_ascii=False))
        return 0 if verdict is None else verdict.exit_status
    shown = ""
    for _ in dec.windows():
        text = rt.tokenizer.decode(dec.new_tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):        # wait for the rest of a split UTF-8 character
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text
    report = dec.report()
    report["probe_s"] = probe_s
    print()
    # the speeds in words, each named for what it counts (tok_s keeps the prefill in,
    # decode_tok_s leaves it out; the baseline says its source), then the same figures as JSON
    from engine.cost.baseline import speed_words
    print(f"specscope: {report['new_tokens']} tokens in {report['windows']} windows: "
          f"{speed_words(report)}", file=sys.stderr)
    summary = {k: report[k] for k in ("new_tokens", "windows", "tokens_per_pass", "tok_s",
                                      "decode_tok_s", "first_token_s", "baseline",
                                      "wall_s", "load_s", "probe_s", "finish_reason", "device",
                                      "dtype", "activation_dtype", "weight_format")}
    print(json.dumps(summary), file=sys.stderr)
    verdict = _check_exact(a, rt, ids, settings, report["tokens"], quiet)
    if verdict is None:
        return 0
    print(f"check-exact: {verdict.verdict}")
    return verdict.exit_status


def _cost_profile(rt, settings: DecodeSettings):
    """(the device's cost profile, seconds spent finding it) for a run whose windows are priced
    (adaptive); (None, 0.0) otherwise. A first run on this model and device measures it (about a
    minute on a CPU), said on stderr with progress even with --json; the report's wall_s runs
    from the prefill on, so the probe's time is its own field, probe_s."""
    import time
    if not (settings.adaptive and settings.draft != "none"):
        return None, 0.0
    from engine.cost.probe import card_profile
    t0 = time.perf_counter()
    profile = card_profile(rt, progress=Progress(), check=True)
    return profile, round(time.perf_counter() - t0, 3)


def _use_threads(a: argparse.Namespace) -> None:
    """--threads N, else what the window uses (one core left for its UI: see
    engine.model.device.leave_a_core_for_the_ui), so a profile measured here prices the window
    right and the other way round."""
    import torch

    from engine.model.device import leave_a_core_for_the_ui
    n = getattr(a, "threads", None) if a.command == "generate" else None
    if n:
        torch.set_num_threads(n)
    else:
        leave_a_core_for_the_ui()


def _check_exact(a: argparse.Namespace, rt, ids, settings, tokens, quiet: bool):
    """--check-exact: the same prompt decoded plainly (same runtime, draft none, greedy) and
    compared with the run's tokens (engine.speculation.exactness); None without the flag."""
    if not a.check_exact:
        return None
    from engine.speculation.exactness import check_exact
    if not quiet:
        print("specscope: check-exact: decoding the prompt plainly to compare", file=sys.stderr)
    return check_exact(rt, ids, settings, tokens)


def cmd_roofline(a: argparse.Namespace) -> int:
    if a.engine == "llamacpp":                 # llama.cpp's own curve, by its llama-bench
        from specscope.roofline_llamacpp import run_llamacpp_roofline
        return run_llamacpp_roofline(a)
    from engine.session import draft_opener, open_runtime
    drafts = None
    if a.draft_model:
        def drafts(rt):
            from engine.speculation.model_drafters import check_vocab
            draft = draft_opener(rt, weights=a.weights, progress=Progress())(a.draft_model)
            check_vocab(rt.tokenizer, draft.tokenizer)
            return draft
    return run_roofline(a, lambda: open_runtime(a.model, a.device, a.dtype, weights=a.weights,
                                                 progress=Progress()), draft_factory=drafts)


def cmd_bench(a: argparse.Namespace) -> int:
    from specscope.bench import run_bench
    return run_bench(a)


def cmd_sweep(a: argparse.Namespace) -> int:
    from specscope.sweep_cmd import run_sweep
    return run_sweep(a)


def cmd_export(a: argparse.Namespace) -> int:
    from specscope.sweep_cmd import run_export
    return run_export(a)


def cmd_doctor(a: argparse.Namespace) -> int:
    from specscope.doctor import run_doctor
    return run_doctor(a)


def build_parser() -> argparse.ArgumentParser:
    """One parser for the window (no subcommand) and every subcommand."""
    p = Parser(
        prog="specscope",
        description="A workbench for speculative decoding. With no subcommand, opens the window.",
    )
    w = p.add_argument_group("the window (no subcommand)")
    w.add_argument("--screenshot", metavar="FILE", help="run offscreen, save the window as PNG")
    w.add_argument("--windows", type=int, default=20,
                   help="windows to run before --screenshot (0: the whole run)")
    w.add_argument("--size", metavar="WxH", type=window_size,
                   help="the window's size in pixels, e.g. 1280x720 (default 1640x1000)")
    w.add_argument("--replay", metavar="JSONL", help="open a recording instead of a model")
    w.add_argument("--prompt-file", "--gui-prompt-file", dest="gui_prompt_file", metavar="FILE",
                   help="prompt for the window: .txt raw text; .json chat messages")
    w.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: every core but one, the other for the window)")
    w.add_argument("--no-probe", action="store_true",
                   help="do not probe the card's verify cost when no saved profile exists")
    add_window_draft_args(w)
    add_model_args(p)
    sub = p.add_subparsers(dest="command")
    g = sub.add_parser("generate", help="headless run; prints text, or one JSON report with --json")
    add_model_args(g, top=False)
    add_decode_args(g)
    g.add_argument("--json", action="store_true", help="print one JSON report")
    g.add_argument("--threads", type=positive_int, default=None, metavar="N",
                   help="torch CPU threads (default: as the window, every core but one)")
    g.add_argument("--check-exact", action="store_true",
                   help="after the run, decode the prompt plainly (draft none, greedy) and compare: "
                        "'identical to plain decoding' or where it first differs; exit status 3 "
                        "on a difference (greedy only)")
    g.set_defaults(func=cmd_generate)
    r = sub.add_parser("roofline", help="measure verify cost vs rows; write a device profile")
    add_model_args(r, top=False)
    add_roofline_args(r)
    add_llamacpp_args(r)
    r.set_defaults(func=cmd_roofline)
    b = sub.add_parser("bench", help="ours and peers side by side")
    add_model_args(b, top=False)
    add_bench_args(b)
    b.set_defaults(func=cmd_bench)
    sw = sub.add_parser("sweep", help="decode a grid of drafter x depth x width; DIR/sweep.json and .csv")
    add_model_args(sw, top=False)
    add_sweep_args(sw)
    sw.set_defaults(func=cmd_sweep)
    ex = sub.add_parser("export", help="a sweep's best (or chosen) cell for us, llama.cpp or vLLM")
    add_export_args(ex)
    ex.set_defaults(func=cmd_export)
    le = sub.add_parser("lesson", help="reproduce a write-up's figure on this device: NAME.svg, .csv, .md "
                            "(and NAME.png with the GUI extra)")
    add_model_args(le, top=False)
    add_lesson_args(le)
    le.set_defaults(func=run_lesson_cmd)
    dr = sub.add_parser("doctor", help="check this machine's GPU, Triton kernels, graphs and the "
                                       "model; --compile-for TARGETS compiles for cards not here")
    add_model_args(dr, top=False)
    add_doctor_args(dr)
    dr.set_defaults(func=cmd_doctor)
    return p


class Parser(argparse.ArgumentParser):
    """argparse with a bad value as one line (no usage dump), like every other error here."""

    def error(self, message: str) -> NoReturn:
        fail(f"{one_line(message, 400)}; see `{self.prog} --help`")
        sys.exit(2)

    def _print_message(self, message: str, file=None) -> None:   # argparse's drops OSError: a full disk
        if message:
            (file or sys.stderr).write(message)


def fail(message: object) -> int:
    """Print `specscope: error: MESSAGE` as one line of bounded length; the exit status 2."""
    print(f"specscope: error: {one_line(message)}", file=sys.stderr)
    return 2


def _stdout_to_devnull() -> None:
    """After a closed pipe or a full disk, what is still buffered goes nowhere (else Python's
    last flush at exit fails again, with a traceback-like notice)."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):   # stdout is not a real file (tests capture it)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. A closed stdout (`specscope ... | head`) ends quietly with status 0; a
    full disk, like every error a user can fix, is one `specscope: error:` line and status 2."""
    try:
        try:
            code = _main(argv)
        except SystemExit:             # argparse: --help printed, or a bad value reported
            sys.stdout.flush()
            raise
        sys.stdout.flush()             # a full disk shows here, not in Python's flush at exit
        return code
    except BrokenPipeError:
        _stdout_to_devnull()
        return 0
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        _stdout_to_devnull()
        where = f" {e.filename}" if e.filename else " the output"
        return fail(f"cannot write{where}: {e.strerror or e}; free some space (or write elsewhere)")


def _quiet_qt() -> None:
    """Qt's "propagateSizeHints()" notice filtered out (workbench.qt_messages), where Qt is
    installed (a lesson runs without the GUI extra too)."""
    try:
        from workbench.qt_messages import install_message_filter
        install_message_filter()
    except ImportError:
        pass


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.command in (None, "lesson"):      # these may draw offscreen: Qt's noise left out
        _quiet_qt()
    if a.command in THREADED:
        _use_threads(a)
    try:
        if a.command is None:
            from workbench.app import main as gui_main   # Qt only here, never in the engine
            return gui_main(a)
        return a.func(a)
    except SpecscopeError as e:
        return fail(e)
    except KeyboardInterrupt:
        print("specscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
