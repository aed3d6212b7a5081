"""The fast tier (`make test-fast`): the tests that load no model, compile no kernel and start no
Python child (which may do either).

A test is marked `model` by tests/conftest.py when its fixtures need a model (`MODEL_FIXTURES`:
every runtime, host and window fixture needs `loaded_model`; the outside references need
`hf_model`) or when it is named in `MODEL_TESTS` (what no fixture shows: a model file written and
loaded by the test itself, the command line or a Triton interpreter in a child, a kernel compile).
With SPECSCOPE_TEST_FAST=1 the `model` tests are left out, and `arm()` makes loading a model,
compiling a Triton kernel and starting a Python child refuse: a test that does one of them
unmarked fails with the line to add here, instead of slowing the tier. The refusal is recorded as
well as raised, so code that turns every exception into a message of its own still fails the test.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

FAST_ENV = "SPECSCOPE_TEST_FAST"

MODEL_FIXTURES = frozenset({"loaded_model", "hf_model"})

# file -> tests (all of the file's tests when empty); a test is named without its parameters
MODEL_TESTS: dict[str, tuple[str, ...]] = {
    # model files written (or the bundled one read) and loaded by the test itself
    "tests/engine/io/test_hostile_models.py": (),
    "tests/engine/io/test_hostile_files.py": (
        "test_gguf_is_checked_as_a_whole", "test_gguf_control_the_same_patches_made_harmlessly_load",
        "test_a_norm_all_zero_or_not_finite_is_named", "test_absurd_rope_scaling_in_a_gguf_is_refused",
        "test_rope_scaling_control_real_values_load", "test_absurd_rope_scaling_in_an_hf_config_is_refused",
        "test_hf_rope_scaling_control_loads", "test_a_token_id_past_the_embedding_is_refused",
        "test_safetensors_tensors_sharing_bytes_are_refused",
        "test_safetensors_duplicate_names_and_loose_bytes_are_refused",
        "test_safetensors_control_a_rewritten_header_loads", "test_cli_hostile_gguf_and_prompt_are_one_line",
        "test_cli_norms_overflowing_to_inf_at_the_cpu_head",
        "test_a_prompt_longer_than_the_context_can_hold_is_refused_before_tokenizing"),
    "tests/fuzz/test_fuzz_tensor_infos.py": (),
    "tests/fuzz/test_fuzz_saved_files.py": ("test_fuzz_recordings", "test_recording_versions_and_spin_box_ranges"),
    "tests/engine/io/test_loading.py": (
        "test_bundled_model_config_weights_and_speed", "test_gguf_shape_mismatch_and_missing_tensor",
        "test_gguf_unknown_architecture", "test_gguf_unsupported_tensor_type", "test_hf_folder_errors",
        "test_llama3_rope_scaling_read_from_rope_freqs", "test_load_errors_speak_plainly",
        "test_missing_paths_and_folders", "test_not_a_gguf_and_garbage", "test_tiny_gguf_matches_hf_folder",
        "test_tiny_hf_bfloat16_and_sharded", "test_tiny_hf_folder_weights_equal_transformers_parameters",
        "test_truncated_and_corrupted_copies_of_the_bundled_gguf"),
    "tests/engine/model/test_packed_model.py": (
        "test_runtime_builds_weights_one_by_one_with_progress",
        "test_streamed_gguf_load_never_holds_a_float_copy",
        "test_streamed_safetensors_load_never_holds_a_float_copy"),
    "tests/engine/model/test_parity.py": ("test_tiny_hf_folders_give_transformers_logits",),
    "tests/engine/model/test_rope.py": (
        "test_scaled_tiny_models_give_transformers_logits_past_the_original_context",
        "test_unsupported_rope_variants_are_refused_by_name",
        "test_yarn_gguf_defaults_attn_factor_and_log_multiplier",
        "test_yarn_gguf_reads_the_converters_keys_and_gives_transformers_logits"),
    "tests/engine/speculation/test_model_drafters.py": (
        "test_cli_vocabulary_mismatch_and_larger_draft_warning",
        "test_the_draft_cache_follows_the_committed_text", "test_the_warning_reaches_the_first_event_only"),
    "tests/fuzz/test_fuzz.py": ("test_fuzz_hostile_inputs",),
    "tests/workbench/test_hostile_recordings.py": (
        "test_bad_recording_is_one_line", "test_replay_prints_its_reason_on_stderr_and_exits_2",
        "test_the_good_recording_loads"),
    # transformers' reading of the bundled GGUF (its tokenizer: the `reference` fixtures)
    "tests/engine/io/test_tokenizer.py": (
        "test_ids_equal_transformers_on_digit_free_text", "test_ids_equal_transformers_with_smollm_pretokenizer",
        "test_digit_split_follows_llama_cpp", "test_decode_round_trips_and_equals_transformers",
        "test_chat_template_equals_transformers", "test_hf_files_saved_by_transformers_load_identically"),
    # Triton: a compile, or the interpreter in a child
    "tests/engine/model/test_kernel_catalog.py": (
        "test_every_kernel_compiles_for_the_users_cards_and_the_h200", "test_the_check_fails_on_what_stops_a_card"),
    "tests/engine/model/test_pdl.py": (
        "test_the_matmul_sends_for_weights_before_it_waits_and_reads_nothing_before",
        "test_the_kernels_ordinary_launch_is_unchanged_by_the_pdl_code",
        "test_every_pdl_kernel_waits_before_its_first_global_read_or_store",
        "test_the_late_trigger_lets_the_next_kernel_start_after_the_weights_are_read"),
    "tests/engine/model/test_fused_layer.py": ("test_fused_layer_in_the_triton_interpreter",),
    "tests/engine/model/test_topk.py": ("test_topk_in_the_triton_interpreter",),
    "tests/engine/weights/test_triton_interpret.py": ("test_kernels_in_the_triton_interpreter",),
    "tests/bench/test_tree_vs_llamacpp.py": (),     # the script in a child, the bundled model
    "tests/bench/test_q4k_native_ab.py": (),         # the A/B script in a child, under the interpreter
    "tests/bench/test_gemv_kernel.py": ("test_gemv_kernel_in_the_triton_interpreter",),
    "tests/bench/test_gpu_speed.py": (
        "test_a_failing_part_keeps_the_others", "test_all_then_summary_on_the_cpu",
        "test_matmul_part_in_the_triton_interpreter"),
    # the command line (or the engine's import) in a child process
    "tests/specscope/test_cli.py": (
        "test_bad_input_is_one_clear_line", "test_bad_prompt_file_and_overlong_prompt",
        "test_bad_weights_option_is_one_clear_line", "test_roofline_command_writes_a_valid_profile",
        "test_roofline_prices_a_draft_model_and_named_exit_layers"),
    "tests/specscope/test_cli_check_exact.py": (),
    "tests/specscope/test_cli_hostile.py": (
        "test_a_prompt_that_fits_with_draft_none_runs", "test_dtype_before_the_subcommand_is_honoured",
        "test_prompt_file_that_is_a_folder_or_not_utf8", "test_roofline_context_beyond_the_model_names_context"),
    "tests/specscope/test_doctor.py": (
        "test_asking_for_the_gpu_without_one_fails_the_gpu_check_with_its_fix",
        "test_doctor_without_a_gpu_skips_the_gpu_checks_passes_and_names_the_activation_dtype",
        "test_kernel_checks_in_the_triton_interpreter",
        "test_a_broken_model_fails_the_model_check"),
    "tests/specscope/test_cli_check_exact.py": (),
    "tests/specscope/test_hostile_files.py": (
        "test_a_closed_stdout_exits_quietly", "test_a_full_disk_on_stdout_is_one_line",
        "test_a_huge_error_message_is_cut", "test_a_huge_tokenizer_json_is_refused_before_the_tokenizer_reads_it",
        "test_a_llama_bench_that_never_exits_is_stopped", "test_a_llama_bench_that_prints_no_json",
        "test_a_llama_bench_that_writes_a_lot_on_one_stream_does_not_deadlock",
        "test_a_llama_bench_with_endless_output_is_stopped", "test_a_lone_surrogate_in_a_prompt_is_one_line",
        "test_hostile_json_in_a_model_folder_is_one_line"),
    "tests/specscope/test_lesson_cmd.py": ("test_lesson_knee_writes_png_csv_and_md",
                                           "test_without_pyside6_a_lesson_says_so_first_and_writes_its_svg"),
    "tests/workbench/test_window_fit.py": ("test_a_path_that_is_no_model_is_one_line_and_exit_2",),
    "tests/workbench/test_workbench.py": ("test_engine_imports_without_qt",),
    "tests/workbench/test_qt_libs.py": ("test_the_window_says_what_is_missing_and_exits_2",),
    "tests/specscope/test_cli_probe.py": (
        "test_the_first_generate_says_it_measures_the_device_and_reports_the_time_apart",),
    "tests/specscope/test_plain_baseline.py": (),     # `generate` in the test's own process
}


def needs_model(item) -> bool:
    if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    path, _, name = item.nodeid.partition("::")
    named = MODEL_TESTS.get(path)
    return named is not None and (not named or name.split("[")[0] in named)


def enabled() -> bool:
    return os.environ.get(FAST_ENV) == "1"


class FastTierRefusal(AssertionError):
    pass


REFUSED: list[str] = []          # what the running test was refused (checked after each test)


def refuse(what: str):
    msg = (f"a fast-tier test {what}: mark it `model` (tests/fast_tier.py, MODEL_TESTS) so that "
           f"`make test-fast` leaves it out")
    REFUSED.append(msg)
    raise FastTierRefusal(msg)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Applies a patch to a module right after its first import (transformers' model and
    tokenizer bases: importing them up front would cost seconds)."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        run, patch = spec.loader.exec_module, self.patches[name]

        def exec_module(module):
            run(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec


def arm() -> None:
    """Before collection: a test module's `from engine.io.load import load_model` gets the guard."""
    import multiprocessing.process
    import subprocess

    import triton

    import engine.io.load as load

    def load_model(*args, **kwargs):
        refuse("loaded a model (engine.io.load.load_model)")

    def compile(*args, **kwargs):
        refuse("compiled a Triton kernel (triton.compile)")

    class Popen(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
            exe = Path(os.fsdecode(argv[0]).split()[0]).name if argv else ""
            if exe == Path(sys.executable).name or exe.startswith("python"):
                refuse(f"started a Python child ({' '.join(map(os.fsdecode, argv))[:120]})")
            super().__init__(args, *rest, **kwargs)

    def start(self):
        refuse("started a process (multiprocessing)")

    def from_pretrained_model(cls, *args, **kwargs):
        refuse("loaded a transformers model (from_pretrained)")

    def from_pretrained_tokenizer(cls, *args, real=None, **kwargs):
        if kwargs.get("gguf_file"):
            refuse("read a GGUF model file through transformers (from_pretrained(gguf_file=...))")
        return real.__func__(cls, *args, **kwargs)

    def patch_models(mod):
        mod.PreTrainedModel.from_pretrained = classmethod(from_pretrained_model)

    def patch_tokenizers(mod):
        real = mod.PreTrainedTokenizerBase.from_pretrained
        mod.PreTrainedTokenizerBase.from_pretrained = classmethod(
            lambda cls, *a, **k: from_pretrained_tokenizer(cls, *a, real=real, **k))

    load.load_model = load_model
    triton.compile = compile
    subprocess.Popen = Popen
    multiprocessing.process.BaseProcess.start = start
    patches = {"transformers.modeling_utils": patch_models,
               "transformers.tokenization_utils_base": patch_tokenizers}
    for name, patch in patches.items():
        if name in sys.modules:
            patch(sys.modules[name])
    sys.meta_path.insert(0, _PatchOnImport({k: v for k, v in patches.items() if k not in sys.modules}))
