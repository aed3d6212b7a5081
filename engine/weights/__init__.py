"""Packed GGUF weights, pure torch: dequantization (bit-identical to gguf), the packed plane
layout shared with the Triton kernels (see ``packed.py``), and packed matmul."""

from .cpu_fast import (CPU_FAST_TYPES, CpuFastWeight, CpuInt8Blocks, cpu_fast_linear,
                       cpu_int8_blocks_linear, cpu_int8_blocks_top, prepare_cpu, prepare_cpu_q8)
from .dequant import SUPPORTED_TYPES, dequantize, qtype_of
from .matmul import dequantized_size, invariant_dense, packed_linear, packed_linear_torch
from .packed import (PACKED_TYPES, PackedWeight, dequantize_packed, native_q4_k, pack, plane_shapes,
                     widen_q6_k)

__all__ = [
    "SUPPORTED_TYPES", "PACKED_TYPES", "PackedWeight",
    "dequantize", "qtype_of", "pack", "plane_shapes", "dequantize_packed", "widen_q6_k",
    "native_q4_k",
    "packed_linear", "packed_linear_torch", "dequantized_size", "invariant_dense",
    "CPU_FAST_TYPES", "CpuFastWeight", "prepare_cpu", "cpu_fast_linear",
    "CpuInt8Blocks", "prepare_cpu_q8", "cpu_int8_blocks_linear", "cpu_int8_blocks_top",
]
