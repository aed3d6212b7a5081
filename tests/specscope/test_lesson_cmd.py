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
    for ext in ("png", "svg", "csv", "md"):
        f = out / f"knee.{ext}"
        assert f.is_file() and f.stat().st_size > 500, f
    assert (out / "knee.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "knee.md").read_text(encoding="utf-8") in captured.out
    assert "propagateSizeHints" not in captured.err          # no widget is shown to draw the PNG


def test_bad_lesson_input_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["lesson", "nope"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["lesson", "knee", "--quick", "--device", "cpu", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("specscope: error: --out")


def test_without_pyside6_a_lesson_says_so_first_and_writes_its_svg(tmp_path):
    """PySide6 hidden (as on a machine without the GUI extra): one line before the work says
    there will be no PNG; the SVG, CSV and Markdown are written; no traceback."""
    import subprocess
    import sys
    out = tmp_path / "l"
    code = ("import sys; sys.modules['PySide6'] = None\n"
            "from specscope.cli import main\n"
            f"sys.exit(main(['lesson', 'knee', '--quick', '--device', 'cpu', '--out', {str(out)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    lines = p.stderr.splitlines()
    note = next(i for i, ln in enumerate(lines) if "no PNG" in ln)
    assert "GUI extra" in lines[note] and note < next(i for i, ln in enumerate(lines) if ln.startswith("knee:"))
    assert (out / "knee.svg").read_text(encoding="utf-8").startswith("<svg")
    assert (out / "knee.csv").is_file() and (out / "knee.md").is_file() and not (out / "knee.png").exists()
