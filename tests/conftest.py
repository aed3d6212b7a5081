"""Session-wide fixtures: the bundled model is loaded once for the whole run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# tests/tiny_models.py is imported as a top-level module (`from tiny_models import ...`) by tests in
# any folder; pytest runs with --import-mode=importlib, which puts no test folder on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session", autouse=True)
def fresh_profile_cache(tmp_path_factory):
    """Measured cost profiles go to a cache of this run's own, as on a fresh CI machine: a
    profile saved by an earlier run on this machine must not decide what a test sees."""
    import os
    old = os.environ.get("SPECSCOPE_CACHE")
    os.environ["SPECSCOPE_CACHE"] = str(tmp_path_factory.mktemp("profile-cache"))
    yield
    if old is None:
        os.environ.pop("SPECSCOPE_CACHE", None)
    else:
        os.environ["SPECSCOPE_CACHE"] = old


@pytest.fixture(scope="session")
def loaded_model():
    from engine.io.load import load_model
    return load_model()


@pytest.fixture(scope="session")
def tokenizer(loaded_model):
    return loaded_model.tokenizer


@pytest.fixture(scope="session")
def cpu_runtime(loaded_model):
    from engine.model.runtime import Runtime
    # float32 throughout: the exact reference (weights="auto" packs Q4 files on AVX-512 CPUs)
    return Runtime(loaded_model, "cpu", "float32", weights="dequantized")


@pytest.fixture(scope="session")
def hf_model():
    """transformers' own load of the bundled GGUF (float32): the outside reference. ~30 s."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.io.load import default_model_path
    path = default_model_path()
    return AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def code_edit_prompts():
    from engine.io.workloads import code_edit_rows
    return code_edit_rows()


LESSON_TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def lesson_result(cpu_runtime, tmp_path_factory):
    """lesson_result(name) -> (LessonResult, folder with NAME.csv and NAME.md): each lesson run
    once per session on the bundled model under the quick (test) budget."""
    import time

    from engine.lessons.runner import run_lesson, save_lesson
    from engine.lessons.runs import Budget
    out = tmp_path_factory.mktemp("lessons")
    done: dict = {}

    def get(name: str):
        if name not in done:
            t0 = time.perf_counter()
            result = run_lesson(name, cpu_runtime, Budget.quick_budget())
            LESSON_TIMES[name] = time.perf_counter() - t0
            save_lesson(result, out)
            done[name] = (result, out)
        return done[name]
    get.times = LESSON_TIMES          # seconds per lesson run so far
    return get


def pytest_configure(config):
    # One intra-op thread: on a 2-core machine that is also running anything else, torch's
    # thread pool waits on a descheduled thread at every barrier (5-10x slower decoding seen
    # here); one thread keeps the suite's time predictable.
    import torch
    torch.set_num_threads(1)
