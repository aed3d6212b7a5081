"""The hostile-input tally of issue 12: every case run through the command line as a user would
(`specscope generate`, `roofline`, `--replay`), in this process, each under a 60 s alarm.

    python3 bench/hostile_tally.py            # writes bench/results/hostile_tally.json

A case is "clean" when it exits 2 with exactly one `specscope: error:` line naming it, "ran" when
it exits 0 as it should (a valid edge input); a traceback, a hang (the alarm), an exit 0 where an
error was due ("silent") or a refusal of valid input ("refused") is counted against us.
Model files are the tiny model of tests/fuzz/hostile.py (no download, no GPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "fuzz")]

from gguf import GGMLQuantizationType as Q, GGUFValueType as V  # noqa: E402

from hostile import (CONTEXT, base_tensors, nested_array, shift_tensor_offset, write_gguf,  # noqa: E402
                     write_hf, write_raw_gguf)

NAN, INF = float("nan"), float("inf")
GEN = ["generate", "--device", "cpu", "--max-new-tokens", "4", "--json"]


class Hang(Exception):
    pass


def run(argv: list[str], timeout: int = 60) -> tuple[int | None, str, str, float]:
    from specscope.cli import main

    def alarm(*_):
        raise Hang()

    out, err = io.StringIO(), io.StringIO()
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
    except Hang:
        code = None
    except BaseException:   # noqa: BLE001 (a traceback is what we count)
        err.write(traceback.format_exc())
        code = 1
    finally:
        signal.alarm(0)
    return code, out.getvalue(), err.getvalue(), time.monotonic() - t0


def cases(d: Path) -> list[tuple[str, list[str], bool]]:
    """(name, argv, should run)."""
    out: list[tuple[str, list[str], bool]] = []

    def gguf(name: str, meta=None, tensors=None, raw=None, ok=False, prompt="the cat the cat") -> None:
        p = write_gguf(d / f"{name}.gguf", meta, tensors, raw)
        out.append((name, [*GEN, "--model", str(p), "--prompt", prompt], ok))

    for key, value in [("attention.head_count", (V.UINT32, 0)), ("embedding_length", (V.FLOAT32, NAN)),
                       ("embedding_length", (V.FLOAT32, INF)), ("embedding_length", (V.STRING, "abc")),
                       ("block_count", (V.UINT64, 10 ** 12)), ("block_count", (V.UINT32, 0)),
                       ("attention.head_count_kv", (V.UINT32, 3)), ("attention.head_count", (V.INT32, -4)),
                       ("rope.freq_base", (V.FLOAT32, 0.0)), ("rope.freq_base", (V.FLOAT32, -1e4)),
                       ("rope.freq_base", (V.FLOAT32, NAN)), ("attention.layer_norm_rms_epsilon", (V.FLOAT32, NAN)),
                       ("attention.layer_norm_rms_epsilon", (V.FLOAT32, 0.0)), ("context_length", (V.INT32, -1)),
                       ("context_length", (V.UINT64, 10 ** 15)), ("feed_forward_length", (V.ARRAY, [128, 128])),
                       ("rope.scaling.type", (V.STRING, "longrope")), ("rope.scaling.factor", (V.FLOAT32, INF)),
                       ("attention.key_length", (V.UINT32, 15)), ("vocab_size", (V.UINT32, 10 ** 9))]:
        gguf(f"gguf_{key}_{value[1]}", {f"llama.{key}": value})
    gguf("gguf_context_2^31", {"llama.context_length": (V.UINT32, 2 ** 31)}, ok=True)
    for key, value in [("tokenizer.ggml.tokens", (V.ARRAY, list(range(128)))),
                       ("tokenizer.ggml.merges", (V.ARRAY, ["Ġ zzz"])), ("tokenizer.ggml.merges", (V.ARRAY, [5])),
                       ("tokenizer.ggml.token_type", (V.ARRAY, ["x"])), ("tokenizer.ggml.eos_token_id", (V.BOOL, True)),
                       ("tokenizer.ggml.model", (V.STRING, "llama")), ("general.architecture", (V.STRING, "mamba")),
                       ("general.architecture", (V.UINT32, 5)), ("general.alignment", (V.UINT32, 0)),
                       ("general.alignment", (V.STRING, "32"))]:
        gguf(f"meta_{key}_{str(value[1])[:12]}", {key: value})
    p = write_gguf(d / "tpl_int.gguf", {"tokenizer.chat_template": (V.UINT32, 5)})
    out.append(("template_an_int", [*GEN, "--model", str(p), "--prompt-file", str(d / "chat.json")], False))
    out.append(("template_an_int_raw_prompt", [*GEN, "--model", str(p), "--prompt", "the cat"], True))
    for name, tpl in [("div0", "{{ 1/0 }}"), ("range1e9", "{% for i in range(10**9) %}{% endfor %}"),
                      ("nested_loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
                      ("2e9_chars", "{{ 'a' * 2 * 10**9 }}"), ("recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
                      ("undefined", "{{ x.y }}"), ("syntax", "{% for %}"), ("sandbox", "{{ ''.__class__.__mro__ }}")]:
        p = write_gguf(d / f"tpl_{name}.gguf", {"tokenizer.chat_template": (V.STRING, tpl)})
        out.append((f"template_{name}", [*GEN, "--model", str(p), "--prompt-file", str(d / "chat.json")], False))
    for name in ("output_norm.weight", "blk.1.attn_k.weight"):
        t = base_tensors()
        t[name][0] = NAN
        gguf(f"nan_{name}", tensors=t)
        out.append((f"nan_{name}_sampled", [*GEN, "--model", str(d / f"nan_{name}.gguf"), "--temperature", "0.8"], False))
    t = base_tensors()
    t["blk.1.ffn_up.weight"] = __import__("numpy").zeros((128, 66), "uint8")
    gguf("iq2_xxs", tensors=t, raw={"blk.1.ffn_up.weight": Q.IQ2_XXS})
    p = shift_tensor_offset(write_gguf(d / "offset.gguf"), "output_norm.weight")
    out.append(("offset_off_by_one", [*GEN, "--model", str(p)], False))
    p = write_raw_gguf(d / "nested.gguf", "x.nested", nested_array(100_000))
    out.append(("metadata_nested_100000", [*GEN, "--model", str(p)], False))
    good = write_gguf(d / "good.gguf")
    data = good.read_bytes()
    for i, n in enumerate((3, 20, 1000, len(data) // 2, len(data) - 7)):
        (d / f"trunc{i}.gguf").write_bytes(data[:n])
        out.append((f"truncated_{n}", [*GEN, "--model", str(d / f"trunc{i}.gguf")], False))

    for name, cfg in [("hidden_abc", {"hidden_size": "abc"}), ("rope_scaling_str", {"rope_scaling": "linear"}),
                      ("heads_0", {"num_attention_heads": 0}), ("layers_1e12", {"num_hidden_layers": 10 ** 12}),
                      ("eps_nan", {"rms_norm_eps": NAN}), ("theta_0", {"rope_theta": 0}),
                      ("tie_str", {"tie_word_embeddings": "false"}), ("model_type_list", {"model_type": ["llama"]})]:
        p = write_hf(d / f"hf_{name}", cfg)
        out.append((f"hf_{name}", [*GEN, "--model", str(p), "--prompt", "the cat"], name == "model_type_list"))
    p = write_hf(d / "hf_list", raw_config=[1, 2])
    out.append(("hf_config_a_list", [*GEN, "--model", str(p)], False))
    p = write_hf(d / "hf_index")
    (p / "model.safetensors").rename(p / "model-1.safetensors")
    (p / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["x"]}))
    out.append(("hf_index_weight_map_list", [*GEN, "--model", str(p)], False))
    tok = json.loads((p / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 128, "content": "<x>", "single_word": False, "lstrip": False, "rstrip": False,
                                "normalized": False, "special": True})
    p = write_hf(d / "hf_big_tok", tokenizer_json=json.dumps(tok))
    out.append(("hf_tokenizer_past_embedding", [*GEN, "--model", str(p), "--prompt", "<x>"], False))

    model = str(good)
    for name, data, ok in [("latin1.txt", "caf\xe9".encode("latin-1"), False),
                           ("deep.json", b"[" * 200_000 + b"]" * 200_000, False),
                           ("content_list.json", b'[{"role": "user", "content": [1]}]', False),
                           ("content_num.json", b'[{"role": "user", "content": 5}]', False),
                           ("content_null.json", b'[{"role": "user", "content": null}]', False),
                           ("content_parts.json", b'[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]', True),
                           ("chat.json", b'[{"role": "user", "content": "the cat the cat"}]', True)]:
        (d / name).write_bytes(data)
        out.append((f"prompt_{name}", [*GEN, "--model", model, "--prompt-file", str(d / name)], ok))
    out.append(("prompt_file_a_folder", [*GEN, "--model", model, "--prompt-file", str(d)], False))
    out.append(("fits_with_draft_none", [*GEN, "--model", model, "--prompt", "a" * (CONTEXT - 12), "--draft", "none"], True))
    out.append(("fits_with_lookup", [*GEN, "--model", model, "--prompt", "a" * (CONTEXT - 12), "--draft", "lookup"], True))
    out.append(("seed_negative", [*GEN, "--seed", "-1", "--model", "/nonexistent.gguf"], False))
    out.append(("model_before_subcommand", ["--model", model, "--dtype", "bfloat16", *GEN, "--prompt", "a"], True))
    out.append(("roofline_context_1e9", ["roofline", "--model", model, "--device", "cpu", "--rows", "1",
                                         "--context", "1000000000", "--out", str(d / "p.json")], False))

    rec = d / "rec.jsonl"
    for name, text in [("png", None), ("no_header", '{"a": 1}\n'), ("truncated", '{"specscope_recording": 1}\n{"index"'),
                       ("line_5", '{"specscope_recording": 1}\n5\n'), ("line_null", '{"specscope_recording": 1}\nnull\n'),
                       ("line_list", '{"specscope_recording": 1}\n[1]\n'), ("deep", "[" * 200_000)]:
        p = d / f"rec_{name}.jsonl"
        if text is None:
            p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
        else:
            p.write_text(text)
        out.append((f"replay_{name}", ["--replay", str(p), "--screenshot", str(d / "shot.png")], False))
    del rec
    return out


def main() -> int:
    import os
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "chat.json").write_text('[{"role": "user", "content": "the cat the cat"}]')
        for name, argv, should_run in cases(d):
            code, out, err, secs = run(argv)
            errors = [line for line in err.splitlines() if "error:" in line and line.startswith("specscope")]
            if code is None:
                verdict = "hang"
            elif "Traceback" in err:
                verdict = "traceback"
            elif code == 0:
                verdict = "ran" if should_run else "silent"
            elif code == 2 and len(errors) == 1:
                verdict = "refused" if should_run else "clean"
            else:
                verdict = f"exit {code}, {len(errors)} error lines"
            rows.append({"case": name, "verdict": verdict, "exit": code, "s": round(secs, 2),
                         "message": errors[0][:300] if errors else err.strip()[-300:]})
            print(f"{verdict:10s} {secs:6.2f}s  {name}: {rows[-1]['message'][:150]}", file=sys.stderr)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = {"date": "2026-12-01", "cases": len(rows), "counts": counts, "rows": rows}
    path = ROOT / "bench" / "results" / "hostile_tally.json"
    path.write_text(json.dumps(summary, indent=1))
    print(json.dumps(counts), f"-> {path}")
    return 0 if set(counts) <= {"clean", "ran"} else 1


if __name__ == "__main__":
    sys.exit(main())
