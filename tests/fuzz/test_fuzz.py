"""A seeded fuzz of everything specscope reads from strangers (issue 12): GGUF metadata and
header bytes, HF configs, chat templates, prompt files and recordings.

Every case must end in success or one SpecscopeError (no other exception type), within a few
seconds and without growing memory. A loaded model is also run (three tokens, lookup drafts,
its chat template), so what the loaders let through is exercised too. Cases per second are
printed (`pytest -s`) for the closing figures.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from gguf import GGUFValueType as V

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile import base_metadata, write_gguf, write_hf  # noqa: E402

from engine.errors import SpecscopeError  # noqa: E402

SEED = 12
CASES_PER_KIND = 60          # 6 kinds: 360 cases
CASE_LIMIT_S = 10.0          # no case may take longer (a hang would be far longer)
RSS_GROWTH_LIMIT = 1 << 30   # bytes of peak RSS the whole fuzz may add

NAN, INF = float("nan"), float("inf")
HOSTILE_GGUF = [(V.UINT32, 0), (V.UINT32, 1), (V.INT32, -1), (V.UINT64, 10 ** 12), (V.UINT32, 2 ** 31),
                (V.FLOAT32, NAN), (V.FLOAT32, INF), (V.FLOAT32, -INF), (V.FLOAT32, 0.0), (V.FLOAT32, 1e30),
                (V.FLOAT32, 3.0), (V.STRING, "abc"), (V.STRING, ""), (V.BOOL, True), (V.ARRAY, [1, 2, 3]),
                (V.ARRAY, ["a", "b"]), (V.ARRAY, [[1], [2]]), (V.UINT32, 7), (V.UINT32, 64), None]
HOSTILE_JSON = [0, 1, -1, 10 ** 12, 2 ** 31, 2.5, NAN, INF, "abc", "", True, None, [], [1, 2], {},
                {"rope_type": "yarn", "factor": NAN}, {"type": "linear"}, "linear", 3, 64, 1e-30]
TEMPLATE_PARTS = [
    "{{ messages[0]['content'] }}", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "{{ 1/0 }}", "{{ x.y }}", "{{ 'a' * N }}", "{% for i in range(N) %}.{% endfor %}",
    "{{ (range(N)|list)|length }}", "{{ messages|tojson }}", "{{ raise_exception('no') }}",
    "{{ 'ab'|center(N) }}", "{{ bos_token ~ eos_token }}", "{% if add_generation_prompt %}A:{% endif %}",
    "{{ messages[5] }}", "{{ N ** N }}", "{{ '%' ~ N ~ 'd' }}", "{{ messages.__class__ }}",
    "{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "{{ (messages * N)|length }}", "{{ [1,2]|sum(start=N) }}", "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{{ '{:>N}'.format(1) }}", "{{ messages[0].content|wordwrap(3) }}", "{% for",
]
NUMBERS = ["0", "3", "-1", "1000", "100000", "10**9", "10**20", "2**31"]


@dataclass
class Tally:
    ok: int = 0
    errors: int = 0
    cases: int = 0


def run_case(tally: Tally, name: str, case: Callable[[], Any]) -> None:
    """One case: success or one SpecscopeError; anything else fails the test with the case."""
    t0 = time.monotonic()
    try:
        case()
        tally.ok += 1
    except SpecscopeError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), f"{name}: a multi-line message: {e!r}"
        tally.errors += 1
    except Exception as e:      # noqa: BLE001 (the point of the test)
        raise AssertionError(f"{name}: {type(e).__name__}: {e}") from e
    tally.cases += 1
    assert time.monotonic() - t0 < CASE_LIMIT_S, f"{name} took {time.monotonic() - t0:.1f} s"


def use_model(path: Path, messages: Any = None) -> None:
    """Load, build on the CPU, render the chat template, decode three tokens."""
    from engine.io.load import load_model
    from engine.io.prompts import encode_prompt
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings

    loaded = load_model(path)
    rt = Runtime(loaded, "cpu", "float32", weights="dequantized")
    ids = encode_prompt(rt.tokenizer, messages or [{"role": "user", "content": "the cat the cat the"}])
    report = Decoder(rt, ids, DecodeSettings(draft="lookup", max_new_tokens=3), detail=False).run()
    assert 1 <= report["new_tokens"] <= 3


def template(rng: random.Random) -> str:
    parts = rng.sample(TEMPLATE_PARTS, rng.randint(1, 3))
    return "".join(parts).replace("N", rng.choice(NUMBERS))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("fuzz")
    gguf = write_gguf(d / "base.gguf")
    return {"dir": d, "gguf": gguf, "gguf_bytes": gguf.read_bytes(), "hf": write_hf(d / "hf")}


def test_fuzz_hostile_inputs(base, monkeypatch) -> None:
    import engine.io.chat as chat
    from workbench.recording import load_recording

    monkeypatch.setattr(chat, "MAX_RENDER_S", 0.25)     # the limit itself is tested elsewhere
    rng = random.Random(SEED)
    d: Path = base["dir"]
    keys = list(base_metadata())
    tally = Tally()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.monotonic()

    for i in range(CASES_PER_KIND):            # GGUF metadata: 1-3 keys get hostile values
        meta = {k: rng.choice(HOSTILE_GGUF) for k in rng.sample(keys, rng.randint(1, 3))}
        if rng.random() < 0.3:
            meta["tokenizer.chat_template"] = (V.STRING, template(rng))
        path = fresh(d / "meta.gguf")
        run_case(tally, f"gguf metadata {meta}", lambda: use_model(write_gguf(path, meta)))

    header_end = base["gguf_bytes"].index(b"blk.0.attn_norm.weight") + 200
    for i in range(CASES_PER_KIND):            # GGUF bytes: overwritten, truncated
        data = bytearray(base["gguf_bytes"])
        kind = rng.choice(["flip", "flip", "truncate", "data"])
        if kind == "truncate":
            data = data[:rng.randrange(len(data))]
        else:
            lo, hi = (0, header_end) if kind == "flip" else (header_end, len(data))
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(lo, hi)] = rng.randrange(256)
        path = fresh(d / "bytes.gguf")
        path.write_bytes(bytes(data))
        run_case(tally, f"gguf bytes case {i} ({kind})", lambda: use_model(path))

    config = json.loads((base["hf"] / "config.json").read_text())
    for i in range(CASES_PER_KIND):            # HF config.json
        cfg = dict(config)
        for k in rng.sample(list(cfg) + ["rope_scaling", "rope_parameters", "head_dim"], rng.randint(1, 3)):
            cfg[k] = rng.choice(HOSTILE_JSON)
        raw = rng.choice(HOSTILE_JSON) if rng.random() < 0.1 else cfg
        (base["hf"] / "config.json").write_text(json.dumps(raw))
        run_case(tally, f"hf config {raw}", lambda: use_model(base["hf"]))
    (base["hf"] / "config.json").write_text(json.dumps(config))

    from engine.io.load import load_model
    tokenizer = load_model(base["gguf"]).tokenizer
    for i in range(CASES_PER_KIND):            # chat templates and message lists
        t = template(rng)
        content = rng.choice(["hi", "", None, 5, [{"type": "text", "text": "a"}], [1], {"a": 1}, "x" * 10000])
        messages = rng.choice([[{"role": "user", "content": content}], [], "hi", [5], [{"role": 1}]])
        run_case(tally, f"template {t!r} on {messages!r}"[:300],
                 lambda: chat.render_chat_template(t, messages, special_tokens=tokenizer.special_tokens))

    from engine.io.prompts import encode_prompt, read_prompt_file
    for i in range(CASES_PER_KIND):            # prompt files: any bytes, any JSON
        kind = rng.choice([".txt", ".json"])
        if rng.random() < 0.4:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        else:
            depth = rng.choice([1, 2, 50, 100_000])
            inner = rng.choice(HOSTILE_JSON + [{"role": "user", "content": "hi"}])
            obj = json.dumps(inner)
            data = ("[" * depth + obj + "]" * depth).encode() if depth > 2 else json.dumps(
                rng.choice([{"messages": [inner]}, [inner], inner])).encode()
        path = d / f"prompt{i}{kind}"
        path.write_bytes(data)
        run_case(tally, f"prompt {kind} {data[:80]!r}",
                 lambda: encode_prompt(tokenizer, read_prompt_file(path)))

    good = recording_lines(d, rng)
    for i in range(CASES_PER_KIND):            # recordings: one field or line replaced
        lines = list(good)
        n = rng.randrange(len(lines))
        if rng.random() < 0.2:
            lines[n] = rng.choice(["5", "null", "[]", "{}", "\x00", '{"specscope_report": 5}', "[" * 100_000])
        else:
            obj = json.loads(lines[n])
            _mutate(obj, rng)
            lines[n] = json.dumps(obj)
        path = d / f"rec{i}.jsonl"
        path.write_text("\n".join(lines))
        run_case(tally, f"recording line {n}: {lines[n][:200]}", lambda: _replay(load_recording(path)))

    elapsed = time.monotonic() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"\nfuzz: {tally.cases} cases in {elapsed:.1f} s ({tally.cases / elapsed:.1f} cases/s): "
          f"{tally.ok} ran, {tally.errors} clean errors, 0 other exceptions; peak RSS +{(rss - rss0) >> 20} MB")
    assert tally.cases >= 300 and tally.ok >= 20 and tally.errors >= 100
    assert rss - rss0 < RSS_GROWTH_LIMIT


def fresh(path: Path) -> Path:
    """path, unlinked first: a model of an earlier case may still map the old file (writing
    over it in place would change the pages under that mapping)."""
    path.unlink(missing_ok=True)
    return path


def recording_lines(d: Path, rng: random.Random) -> list[str]:
    from engine.io.load import load_model
    from engine.model.runtime import Runtime
    from engine.speculation.decoder import Decoder
    from engine.speculation.settings import DecodeSettings
    from workbench.recording import save_recording
    from workbench.store import EventStore

    rt = Runtime(load_model(d / "base.gguf"), "cpu", "float32")
    store = EventStore(header={"settings": DecodeSettings().to_dict(), "model": "base.gguf"})
    for ev in Decoder(rt, [5, 6, 7, 8] * 4, DecodeSettings(draft="tree", max_new_tokens=10)).windows():
        store.append(ev)
    return save_recording(d / "good.jsonl", store).read_text().splitlines()


def _mutate(obj: Any, rng: random.Random) -> None:
    """Replace one value somewhere inside obj (a dict or list) by a hostile one."""
    path = []
    node = obj
    while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.7):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append((node, key))
        node = node[key]
    if path:
        parent, key = path[-1]
        parent[key] = rng.choice(HOSTILE_JSON + [10 ** 7, -5, "x" * 5, [[0]] * 3])


def _replay(store) -> None:
    """What the views derive from a loaded recording, without Qt."""
    if len(store):
        last = len(store) - 1
        store.acceptance(last)
        store.series(last)
        store.observed_ar_ms(last)
        store.emitted_upto(last)
