"""Golden output (llama2.c's test_all idea): the bundled model, a fixed chat prompt, greedy,
exact expected text. Cheap, and it catches a change anywhere from the loader to the sampler."""

from __future__ import annotations

from engine.speculation.decoder import Decoder
from engine.io.prompts import encode_prompt
from engine.speculation.settings import DecodeSettings

PROMPT = [{"role": "user", "content": "Write a Python function that returns the square of a number."}]
EXPECTED = ("```python\ndef square_number(num):\n    return num ** 2\n```\n\nThis function uses the "
            "built-in `**` operator to calculate the square of a number.")


def test_golden_greedy_text(cpu_runtime) -> None:
    ids = encode_prompt(cpu_runtime.tokenizer, PROMPT)
    for draft in ("none", "tree"):
        report = Decoder(cpu_runtime, ids, DecodeSettings(draft=draft, max_new_tokens=40)).run()
        assert report["text"] == EXPECTED, draft
        assert report["finish_reason"] == "eos", draft
