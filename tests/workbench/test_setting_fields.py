"""One table of decode settings (engine.speculation.setting_fields) makes both the command line's
flags and the Controls panel's inputs: the same fields, names, help and values."""

from __future__ import annotations

from dataclasses import fields

from engine.speculation.sampling import SamplingConfig
from engine.speculation.setting_fields import FIELDS
from engine.speculation.settings import DecodeSettings

# every field away from its default, valid together
ODD = DecodeSettings(draft="lookup", depth=5, width=2, ngram_min=2, ngram_max=3, match="first", adaptive=True,
                     ar_floor=True, exit_layer=12, takeover=True, seed=7, max_new_tokens=99,
                     sampling=SamplingConfig(temperature=0.55, top_k=40, top_p=0.9, min_p=0.05,
                                             repeat_penalty=1.1, presence_penalty=0.3,
                                             frequency_penalty=-0.2, penalty_window=32))


def _generate_actions():
    from specscope.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {opt: a for a in sub.choices["generate"]._actions for opt in a.option_strings}


def test_the_table_has_every_setting_once():
    names = [f.name for f in FIELDS]
    want = {f.name for f in fields(DecodeSettings)} - {"sampling"} | {f.name for f in fields(SamplingConfig)}
    assert sorted(names) == sorted(want)


def test_the_command_line_flags_come_from_the_table():
    actions = _generate_actions()
    for f in FIELDS:
        a = actions[f.flag]
        # a device-dependent default (--adaptive) says what it is per device after the table's help
        assert a.dest == f.name and a.help.startswith(f.help), f.name
        assert a.help == f.help or a.help.endswith("on a GPU)"), f.name


def test_the_panel_inputs_come_from_the_table_and_agree_with_the_flags(qtbot):
    from specscope.cli import build_parser, settings_from_args
    from workbench.controls import ControlsPanel
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    for f in FIELDS:
        w = panel.inputs[f.name]
        assert getattr(panel, f.name) is w and f.help in w.toolTip() and f.flag in w.toolTip()
        if hasattr(w, "minimum"):
            assert (w.minimum(), w.maximum()) == (f.lo, f.hi), f.name
    panel.set_settings(ODD)
    assert panel.settings() == ODD
    # the same values through the flags give the same settings
    values = {**ODD.to_dict(), **ODD.to_dict()["sampling"]}
    argv = ["generate"]
    for f in FIELDS:
        v = values[f.name]
        if f.kind is bool:
            argv.append(f.flag if v else f"--no-{f.flag[2:]}")
        elif v is not None:
            argv += [f.flag, str(v)]
    assert settings_from_args(build_parser().parse_args(argv)) == ODD
