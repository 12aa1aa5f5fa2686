"""RESOURCE_EXHAUSTED errors explained with their sizes and the fixes."""

from __future__ import annotations

from tpu_nb.kernel.endings.out_of_memory import explain_out_of_memory


def test_a_compile_time_hbm_overflow_names_used_and_limit() -> None:
    advice = explain_out_of_memory(
        "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 17.55G of 15.48G hbm. Exceeded hbm capacity by 2.07G."
    )
    assert advice is not None
    assert advice.startswith("The device ran out of memory (used 17.55G of 15.48G HBM).")
    assert "per_device_train_batch_size" in advice and "bf16" in advice and "--spmd" in advice


def test_a_failed_allocation_names_its_size_and_what_was_free() -> None:
    advice = explain_out_of_memory(
        "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 1.25G. That was not possible. There are 512.00M free."
    )
    assert advice is not None and "could not allocate 1.25G, 512.00M free" in advice


def test_other_errors_get_no_advice() -> None:
    assert explain_out_of_memory("ValueError: shapes do not match") is None


def test_torch_tpus_own_errors_get_its_advice_and_xlas_keep_theirs() -> None:
    from tpu_nb.kernel.endings.out_of_memory import explain_torch_tpu_error

    missing = explain_torch_tpu_error(
        "operator 'aten::_upsample_bilinear2d_aa.out' is not implemented for TPU. Please file a feature request"
    )
    assert missing is not None and missing.startswith("aten::_upsample_bilinear2d_aa.out has no TPU kernel. Fix: move")
    held = explain_torch_tpu_error(
        "to_copy(): the TPU ran out of memory while awaiting the materialization of value float32[1048576, 1048576]:\n"
        "RESOURCE_EXHAUSTED: Error allocating device buffer"
    )
    assert held is not None and "float32[1048576, 1048576]" in held and "fully_shard" in held
    compile_time = "RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 17.55G of 15.48G hbm."
    assert explain_torch_tpu_error(compile_time) is None  # both stacks' words: torch_xla's advice stays
