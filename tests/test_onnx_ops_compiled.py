"""ONNX ops composed from several compiler ops, compiled for the CPU device on their conformance cases.

The conformance test interprets every case with numpy and compiles only a fixed slice; the ops
here are built from gathers, scans, padded concatenations and zero-size outputs, where a compiled
plan can differ from its interpretation, so one or two cases of each are compiled here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx", reason="the conformance cases ship in the onnx wheel (the onnx extra)")

from asyncjit.onnx.conformance import Case, collect, run_case

CASES = (
    "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal",
    "test_attention_4d_diff_heads_mask4d_padded_kv_expanded",
    "test_flexattention_score_mod",
    "test_linear_attention_gated_delta_gqa",
    "test_causal_conv_with_state_kernel_size_one",
    "test_rotary_embedding_interleaved",
    "test_gridsample_bicubic_align_corners_0_additional_1",
    "test_gridsample_reflection_padding",
    "test_affine_grid_3d",
    "test_dft_irfft",
    "test_stft_with_window",
    "test_range_int32_type_negative_delta_expanded",
    "test_qlinearconv",
    "test_convinteger_with_padding",
    "test_bitshift_right_int8_negative_shift",
    "test_scatternd_max_with_element_indices",
    "test_nonmaxsuppression_two_batches",
    "test_compress_negative_axis",
    "test_nonzero_example",
    "test_unique_sorted_with_axis_3d",
    "test_unique_not_sorted_without_axis",
    "test_scan_sum",
    "test_col2im_pads",
    "test_maxunpool_export_with_output_shape",
    "test_tensorscatter_circular",
    "test_roialign_mode_max",
    "test_deform_conv_with_multiple_offset_groups",
    "test_ai_onnx_ml_tree_ensemble_set_membership",
    "test_maxpool_with_argmax_2d_precomputed_strides",
)


@pytest.fixture(scope="module")
def cases() -> dict[str, Case]:
    return {c.name: c for c in collect(["node"]) if c.name in CASES}


@pytest.mark.parametrize("name", CASES)
def test_compiled_case_matches(cases: dict[str, Case], name: str) -> None:
    """The compiled plan's outputs equal the case's expected outputs."""
    assert run_case(cases[name], "CPU") is None
