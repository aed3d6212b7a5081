"""Session-wide fixtures: the bundled model is loaded once for the whole run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# tests/tiny_models.py is imported as a top-level module (`from tiny_models import ...`) by tests in
# any folder; pytest runs with --import-mode=importlib, which puts no test folder on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))


def built_once(tmp_path_factory, key: str, build):
    """build() once per run, not once per worker. Under pytest-xdist (`make test`: two workers)
    the first worker that needs it builds it and leaves it pickled in the run's shared temp
    folder; another worker loads that (the same object, bit for bit) instead of building it
    again, and waits for it while it is being built. One process: build() alone."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build()
    import pickle

    from filelock import FileLock
    path = tmp_path_factory.getbasetemp().parent / f"built-once-{key}.pickle"
    with FileLock(f"{path}.lock"):
        if path.exists():
            with path.open("rb") as f:
                return pickle.load(f)
        obj = build()
        part = path.with_name(path.name + ".part")
        with part.open("wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        part.replace(path)
        return obj


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
def packed_runtime(loaded_model):
    """Q4_1 kept packed on the exact CPU kernels: float32 throughout, comparable with the float32
    path to 1e-3 (test_packed_model.py; its greedy check rides on test_parity.py's decodes)."""
    from engine.model.runtime import Runtime
    return Runtime(loaded_model, "cpu", "float32", weights="packed", cpu_kernels="exact")


@pytest.fixture(scope="session")
def hf_model(tmp_path_factory):
    """transformers' own load of the bundled GGUF (float32): the outside reference. ~13-30 s,
    once per run (built_once: the other worker unpickles it in about a second)."""
    import torch
    from transformers import AutoModelForCausalLM

    from engine.io.load import default_model_path

    def load():
        path = default_model_path()
        return AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    return built_once(tmp_path_factory, "hf_model", load)


@pytest.fixture(scope="session")
def code_edit_prompts():
    from engine.io.workloads import code_edit_rows
    return code_edit_rows()


@pytest.fixture(scope="session")
def lesson_result(cpu_runtime, tmp_path_factory):
    """lesson_result(name) -> (LessonResult, folder with NAME.csv and NAME.md): each lesson run
    once per run (built_once: the other worker loads it) on the bundled model under the quick
    (test) budget."""
    from engine.lessons.runner import run_lesson, save_lesson
    from engine.lessons.runs import Budget
    out = tmp_path_factory.mktemp("lessons")
    done: dict = {}

    def get(name: str):
        if name not in done:
            result = built_once(tmp_path_factory, f"lesson-{name}",
                                lambda: run_lesson(name, cpu_runtime, Budget.quick_budget()))
            save_lesson(result, out)
            done[name] = (result, out)
        return done[name]
    return get


def pytest_configure(config):
    # One intra-op thread: on a 2-core machine that is also running anything else, torch's
    # thread pool waits on a descheduled thread at every barrier (5-10x slower decoding seen
    # here); one thread keeps the suite's time predictable.
    import torch
    torch.set_num_threads(1)
    config.addinivalue_line(
        "markers", "model: loads a model, compiles a kernel or starts a Python child "
                   "(left out by make test-fast)")
    import fast_tier
    distributing = config.getoption("dist", "no") != "no" and not hasattr(config, "workerinput")
    if fast_tier.enabled() and not distributing:        # (xdist's workers arm their own)
        fast_tier.arm()


# ---- the fast tier (`make test-fast`): tests/fast_tier.py says which tests are `model` ----------

def pytest_collection_modifyitems(config, items):
    import fast_tier
    for item in items:
        if fast_tier.needs_model(item):
            item.add_marker(pytest.mark.model)
    if fast_tier.enabled():
        dropped = [i for i in items if i.get_closest_marker("model")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [i for i in items if not i.get_closest_marker("model")]


def _fail_on_refusals():
    """A refusal the code under test caught and turned into its own message still fails."""
    import fast_tier
    fast_tier.REFUSED.clear()
    try:
        result = yield
    finally:
        seen = fast_tier.REFUSED[:]
        fast_tier.REFUSED.clear()
    if seen:
        raise fast_tier.FastTierRefusal(seen[0])
    return result


pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_fail_on_refusals)
pytest_runtest_call = pytest.hookimpl(wrapper=True)(_fail_on_refusals)
