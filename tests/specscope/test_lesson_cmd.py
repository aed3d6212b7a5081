"""`specscope lesson NAME`: the three files from the command line; bad input in one line.
In-process (specscope.cli.main): a subprocess would load torch and the model again."""

from __future__ import annotations

import pytest

from specscope.cli import main


def test_lesson_knee_writes_png_csv_and_md(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    out = tmp_path / "handouts"
    code = main(["lesson", "knee", "--quick", "--device", "cpu", "--weights", "dequantized", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "| one decode step (1 row) | 25.3 ms |" in captured.out       # the .md, printed
    for ext in ("png", "csv", "md"):
        f = out / f"knee.{ext}"
        assert f.is_file() and f.stat().st_size > 500, f
    assert (out / "knee.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "knee.md").read_text(encoding="utf-8") in captured.out


def test_bad_lesson_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["lesson", "nope"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["lesson", "knee", "--quick", "--device", "cpu", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("specscope: error: --out")
