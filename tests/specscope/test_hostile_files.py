"""Hostile inputs, second round (issue 34): every JSON file specscope reads goes through one
reader (engine.io.jsonfile), every child process is bounded (engine.childproc), and the command
line itself ends cleanly on a bad option value, a closed or full stdout and a huge message.

Each case writes the hostile file in tmp_path and runs the real command line: exactly one
`specscope: error:` line naming the file, exit status 2, no traceback; children and whole
commands run under a subprocess timeout, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from hostile import write_gguf, write_hf  # noqa: E402
from cli_helpers import Result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "llamacpp"
SWEEP = FIX / "sweep_cpu_code-edit.json"
BENCH_JSON = FIX / "llama-bench_cpu-t1_smollm2-q4_1_d1024.json"
CHILD_TIMEOUT_S = 120          # a whole command: a hang would be far longer


def cli(*args, stdout=subprocess.PIPE, timeout: float = CHILD_TIMEOUT_S, **kw) -> Result:
    """The command line in a process of its own (`python -m specscope.cli`)."""
    r = subprocess.run([sys.executable, "-m", "specscope.cli", *map(os.fsencode, args)], stdout=stdout,
                       stderr=subprocess.PIPE, timeout=timeout, cwd=ROOT,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"), **kw)
    out = r.stdout.decode("utf-8", "replace") if isinstance(r.stdout, bytes) else ""
    return Result(r.returncode, out, r.stderr.decode("utf-8", "replace"))


def one_error(r: Result, *needles: str) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-3000:])
    lines = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith("specscope: error: "), r.stderr[-3000:]
    assert len(lines[0]) < 800, len(lines[0])
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------
# 1. One reader for every JSON file

HOSTILE_JSON = {
    "digits": b'{"a": ' + b"9" * 5000 + b"}",           # Python's own limit: a bare ValueError
    "nan": b'{"a": NaN}',
    "infinity": b'{"a": -Infinity}',
    "overflow": b'{"a": 1e999}',                       # a float that parses to inf
    "latin1": b'{"a": "caf\xe9"}',
    "surrogate": b'{"a": "\\ud800"}',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "truncated": b'{"a": ',
    "wrong_type": b'"a string where an object or a list belongs"',
}
NEEDLES = {"digits": "5,000 digits", "nan": "NaN", "infinity": "Infinity", "overflow": "1e999",
           "latin1": "not UTF-8", "surrogate": "surrogate", "deep": "nested too deeply",
           "truncated": "not valid JSON", "wrong_type": ""}


def test_control_the_old_reader_leaks_these() -> None:
    """The control: what the loaders caught before (JSONDecodeError) misses a 5,000-digit
    integer, and plain json accepts NaN and 1e999 (an infinity) as numbers."""
    with pytest.raises(ValueError) as e:
        json.loads(HOSTILE_JSON["digits"])
    assert not isinstance(e.value, json.JSONDecodeError)
    assert json.loads(HOSTILE_JSON["overflow"])["a"] == float("inf")
    assert json.loads(HOSTILE_JSON["nan"])["a"] != json.loads(HOSTILE_JSON["nan"])["a"]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("m") / "m.gguf")


def _hf(tmp_path: Path, name: str, data: bytes) -> Path:
    folder = write_hf(tmp_path / "hf")
    (folder / name).write_bytes(data)
    return folder


LOADERS = {
    # name: (write the hostile bytes somewhere, the command line that reads them) -> (args, file)
    "config.json": lambda t, d, g: (["generate", "--model", _hf(t, "config.json", d), "--prompt", "hi",
                                     "--max-new-tokens", "1", "--device", "cpu"], "config.json"),
    "generation_config.json": lambda t, d, g: (["generate", "--model", _hf(t, "generation_config.json", d),
                                                "--prompt", "hi", "--max-new-tokens", "1", "--device", "cpu"],
                                               "generation_config.json"),
    "tokenizer_config.json": lambda t, d, g: (["generate", "--model", _hf(t, "tokenizer_config.json", d),
                                               "--prompt", "hi", "--max-new-tokens", "1", "--device", "cpu"],
                                              "tokenizer_config.json"),
    "prompt": lambda t, d, g: (["generate", "--model", g, "--prompt-file", _put(t / "p.json", d),
                                "--max-new-tokens", "1", "--device", "cpu"], "p.json"),
    "workload": lambda t, d, g: (["sweep", "--model", g, "--workload",
                                  _put(t / "w.jsonl", b'{"prompt": "hi"}\n' + d + b"\n"),
                                  "--out", t / "out", "--device", "cpu"], "w.jsonl, line 2"),
    "sweep": lambda t, d, g: (["export", "--from", _put(t / "sweep.json", d), "--format", "cli"], "sweep.json"),
    "price_with": lambda t, d, g: (["export", "--from", SWEEP, "--format", "llamacpp", "--price-with",
                                    _put(t / "bench.json", d)], "bench.json"),
}


def _put(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


MODEL_FOLDER_FILES = sorted(k for k in LOADERS if k.endswith(".json"))   # read while a model loads


@pytest.mark.parametrize("loader", sorted(set(LOADERS) - set(MODEL_FOLDER_FILES)))
@pytest.mark.parametrize("kind", sorted(HOSTILE_JSON))
def test_hostile_json_is_one_line_naming_the_file(tmp_path, specscope, gguf, loader, kind) -> None:
    args, name = LOADERS[loader](tmp_path, HOSTILE_JSON[kind], gguf)
    one_error(specscope(*args), name, NEEDLES[kind])


@pytest.mark.parametrize("loader", MODEL_FOLDER_FILES)
@pytest.mark.parametrize("kind", sorted(HOSTILE_JSON))
def test_hostile_json_in_a_model_folder_is_one_line(tmp_path, specscope, gguf, loader, kind) -> None:
    args, name = LOADERS[loader](tmp_path, HOSTILE_JSON[kind], gguf)
    one_error(specscope(*args), name, NEEDLES[kind])


def test_recordings_and_profiles_use_the_same_reader(tmp_path) -> None:
    from engine.cost.profile import CostProfile
    from engine.errors import SpecscopeError
    from workbench.recording import RecordingError, load_recording
    for kind, data in HOSTILE_JSON.items():
        if kind in ("nan", "infinity", "overflow"):
            continue               # a recording's own figures may be NaN: checked by field below
        p = _put(tmp_path / f"{kind}.jsonl", data + b"\n")
        with pytest.raises(RecordingError) as e:
            load_recording(p)
        assert str(p) in str(e.value) and NEEDLES[kind] in str(e.value), str(e.value)
    for kind, data in HOSTILE_JSON.items():
        p = _put(tmp_path / f"{kind}.json", data)
        with pytest.raises(SpecscopeError) as e:
            CostProfile.load(p)
        assert str(p) in str(e.value) and NEEDLES[kind] in str(e.value), str(e.value)


def test_a_recording_whose_typed_numbers_are_nan_is_refused(tmp_path) -> None:
    from engine.speculation.settings import DecodeSettings
    from workbench.recording import RecordingError, load_recording
    head = json.dumps({"specscope_recording": 1, "settings": DecodeSettings().to_dict(), "model": "m",
                       "device": "CPU"})
    stats = {"new_tokens": 1, "forward_passes": 1, "tokens_per_pass": float("nan"), "proposed_draft_tokens": 0,
             "accepted_draft_tokens": 0, "accept_rate_by_depth": [], "tok_s": 1.0, "elapsed_s": 1.0}
    event = {"index": 0, "committed_len": 3, "root_token": 1, "root_text": "a", "tokens": [], "texts": [],
             "parents": [], "depths": [], "provenance": [], "rows": [], "accepted_path": [], "emitted": [5],
             "emitted_texts": ["b"], "emitted_kinds": ["target"], "propose_ms": 0.0, "verify_ms": 1.0,
             "commit_ms": 0.0, "window_ms": 1.0, "stats": stats, "drafter": "none", "depth": 0, "width": 0,
             "greedy": True, "figures": {"ms": float("nan")}}
    p = tmp_path / "r.jsonl"
    p.write_text(head + "\n" + json.dumps(event) + "\n")
    with pytest.raises(RecordingError, match="tokens_per_pass is NaN"):
        load_recording(p)
    stats["tokens_per_pass"] = 1.0              # NaN in the free-form figures is ours: it loads
    p.write_text(head + "\n" + json.dumps(event) + "\n")
    assert len(load_recording(p).events) == 1


@pytest.mark.parametrize("loader, cap", [("sweep", 64 << 20), ("prompt", 64 << 20), ("workload", 256 << 20),
                                         ("price_with", 16 << 20)])
def test_files_over_the_cap_are_refused_before_reading(tmp_path, specscope, gguf, loader, cap) -> None:
    args, name = LOADERS[loader](tmp_path, b"", gguf)
    path = next(Path(a) for a in args if isinstance(a, Path) and a.name in name)
    with open(path, "r+b") as f:                  # sparse: no disk and no time to write it
        f.truncate(cap + 1)
    one_error(specscope(*args), path.name, f"the limit is {cap:,}")


def test_a_huge_tokenizer_json_is_refused_before_the_tokenizer_reads_it(tmp_path, specscope) -> None:
    folder = write_hf(tmp_path / "hf")
    with open(folder / "tokenizer.json", "r+b") as f:
        f.truncate((128 << 20) + 1)
    one_error(specscope("generate", "--model", folder, "--prompt", "hi", "--device", "cpu"),
              "tokenizer.json", "too large")


def test_a_fifo_is_not_read(tmp_path, specscope) -> None:
    """A FIFO (or /dev/zero) as a JSON file would block or never end: refused by its kind."""
    fifo = tmp_path / "bench.json"
    os.mkfifo(fifo)
    one_error(specscope("export", "--from", SWEEP, "--format", "llamacpp", "--price-with", fifo),
              "bench.json", "not a regular file")
    one_error(specscope("export", "--from", "/dev/zero", "--format", "cli"), "/dev/zero")


# ---------------------------------------------------------------------------------------------
# 2. Every child process bounded

def _stand_in(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _roofline(tmp_path: Path, bench: Path, *more: str) -> Result:
    model = _put(tmp_path / "m.gguf", b"GGUF")        # llama-bench's business, not ours
    return cli("roofline", "--engine", "llamacpp", "--llama-bench", bench, "--model", model,
               "--out", tmp_path / "profile.json", *more)


def test_a_llama_bench_that_never_exits_is_stopped(tmp_path) -> None:
    bench = _stand_in(tmp_path, "llama-bench", """\
        import subprocess, time
        subprocess.Popen(["sleep", "600"])        # a grandchild holding the pipes too
        time.sleep(600)
        """)
    one_error(_roofline(tmp_path, bench, "--llama-bench-timeout", "3"), "llama-bench ran past 3 s")


@pytest.mark.parametrize("first", ["stderr", "stdout"])
def test_a_llama_bench_that_writes_a_lot_on_one_stream_does_not_deadlock(tmp_path, first) -> None:
    """200 KB on one stream before the other: more than a pipe holds, so reading one stream to
    its end before the other would wait forever."""
    data = json.loads(BENCH_JSON.read_text())
    records = json.dumps(data["records"] if isinstance(data, dict) else data)
    bench = _stand_in(tmp_path, "llama-bench", f"""\
        import sys
        records = {records!r}
        if {first!r} == "stderr":
            sys.stderr.write("llama-bench chatter\\n" * 10_000); sys.stderr.flush()
            sys.stdout.write(records)
        else:
            sys.stdout.write(records + " " * 200_000); sys.stdout.flush()
            sys.stderr.write("benchmark 1/1: done\\n" * 10_000)
        """)
    r = _roofline(tmp_path, bench, "--llama-bench-timeout", "60")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert json.loads((tmp_path / "profile.json").read_text())["ms_by_rows"]


def test_a_llama_bench_with_endless_output_is_stopped(tmp_path) -> None:
    bench = _stand_in(tmp_path, "llama-bench", """\
        import sys
        while True:
            sys.stdout.write("x" * 65536)
        """)
    one_error(_roofline(tmp_path, bench), "llama-bench wrote more than", "stdout")


def test_a_llama_bench_that_prints_no_json(tmp_path) -> None:
    bench = _stand_in(tmp_path, "llama-bench", "print('[' + '9' * 5000 + ']')\n")
    one_error(_roofline(tmp_path, bench), "llama-bench's output", "5,000 digits")


def test_unbalanced_quotes_in_llama_bench_args(tmp_path, specscope) -> None:
    bench = _stand_in(tmp_path, "llama-bench", "print('[]')\n")
    model = _put(tmp_path / "m.gguf", b"GGUF")
    one_error(specscope("roofline", "--engine", "llamacpp", "--llama-bench", bench, "--model", model,
                        "--llama-bench-args", "-ngl '99"), "--llama-bench-args", "quotation")


def test_a_check_binary_whose_help_never_ends_is_stopped(tmp_path, specscope) -> None:
    binary = _stand_in(tmp_path, "llama-server", """\
        import sys
        while True:
            sys.stdout.write("-m, --model FNAME  " * 4096 + "\\n")
        """)
    one_error(specscope("export", "--from", SWEEP, "--format", "llamacpp", "--check-binary", binary),
              "--help wrote more than")


# ---------------------------------------------------------------------------------------------
# 3. The command line itself

def test_a_bad_option_value_is_one_line_without_usage(specscope) -> None:
    r = specscope("generate", "--depth", "x")
    line = one_error(r, "--depth", "invalid int value", "specscope generate --help")
    assert "usage:" not in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_a_closed_stdout_exits_quietly(tmp_path) -> None:
    read, write = os.pipe()
    os.close(read)                      # nobody will read: the first write is EPIPE
    try:
        r = cli("export", "--from", SWEEP, "--format", "cli", stdout=write)
    finally:
        os.close(write)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_on_stdout_is_one_line(tmp_path) -> None:
    with open("/dev/full", "wb") as full:
        r = cli("export", "--from", SWEEP, "--format", "cli", stdout=full)
    one_error(r, "No space left on device")
    with open("/dev/full", "wb") as full:
        one_error(cli("--help", stdout=full), "No space left on device")


def test_a_huge_error_message_is_cut(tmp_path, specscope, gguf) -> None:
    """A chat template's `raise` with a 1 MB message, a 1 MB bad option value: one line of
    bounded length each."""
    folder = write_hf(tmp_path / "hf")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{{ raise_exception('" + "boom " * 200_000 + "') }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    prompt = _put(tmp_path / "chat.json", b'[{"role": "user", "content": "hi"}]')
    line = one_error(specscope("generate", "--model", folder, "--prompt-file", prompt, "--device", "cpu",
                               "--max-new-tokens", "1"), "boom")
    assert len(line) < 700
    line = one_error(specscope("generate", "--depth", "9" * 1_000_000 + "x"), "--depth", "invalid int value")
    assert "…" in line and line.endswith("see `specscope generate --help`") and len(line) < 600


def test_a_lone_surrogate_in_a_prompt_is_one_line(tmp_path, gguf) -> None:
    """Bytes that are not UTF-8 on the command line reach Python as lone surrogates."""
    r = cli("generate", "--model", gguf, "--device", "cpu", "--max-new-tokens", "1",
            "--prompt", b"caf\xe9 \xff")
    one_error(r, "surrogate")


def test_the_errors_module_cuts_and_flattens() -> None:
    from engine.errors import MAX_MESSAGE_CHARS, one_line
    assert one_line("a\nb\x1b[2Jc\udcff") == "a b [2Jc?"
    long = one_line("x" * 10_000_000)
    assert len(long) == MAX_MESSAGE_CHARS + 1 and long.endswith("…")
