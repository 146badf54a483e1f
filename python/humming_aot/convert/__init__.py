"""Checkpoint importers: each turns one quantization tool's tensors of a layer into the unified
``reference.QuantizedWeight``, bit for bit (codes, scales and zero points are moved, never
re-quantized).

* ``gptq``: GPTQ (AutoGPTQ / GPTQModel), v1 and v2 zero points, 2/3/4/8 bits, act-order.
* ``awq``: AWQ GEMM packing (4 bits, interleaved nibbles, integer zero points).
* ``compressed_tensors``: the ``pack-quantized`` compressor (int weights, group / channel / tensor /
  block strategies, act-order); its ``convert_layer`` also dispatches the formats of
* ``compressed_tensors_fp``: ``float-quantized`` FP8 and ``int-quantized`` int8 (channel / tensor /
  group / block), ``nvfp4-pack-quantized`` (global scale stored as a divisor) and
  ``mxfp4-pack-quantized``.
* ``fp8_block``: FP8 with 128 x 128 ``weight_scale_inv`` block scales (DeepSeek-V3 style; the scale
  multiplies despite its name).
* ``modelopt``: NVIDIA ModelOpt NVFP4 (``weight_scale_2`` multiplies) and FP8.
* ``gpt_oss``: gpt-oss MXFP4 ``blocks`` + ``scales``, one weight per expert.
* ``bitnet``: BitNet b1.58 ternary weights (``u2`` codes with the implied zero).

Each module has ``convert(...)`` (the layer's tensors as arguments) and ``convert_layer(tensors,
prefix, config)`` (a state dict and the layer's name). Both return a ``ConvertedWeight``:
``.weight`` is the ``QuantizedWeight``; ``.perm``, when not None, is the input permutation the
caller must apply to the activations (``x.index_select(-1, perm)``), see ``ConvertedWeight``.
A checkpoint the unified format cannot hold exactly raises ``ConversionError`` naming the layer,
the field and the value. ``fuse(parts)`` stacks projections that share an input (q/k/v, gate/up)
into one weight, each part keeping its own scales.
"""

from ._common import ConversionError, ConvertedWeight, fuse
from . import awq, bitnet, compressed_tensors, compressed_tensors_fp, fp8_block, gpt_oss, gptq, modelopt

__all__ = [
    "ConversionError",
    "ConvertedWeight",
    "fuse",
    "gptq",
    "awq",
    "compressed_tensors",
    "compressed_tensors_fp",
    "fp8_block",
    "modelopt",
    "gpt_oss",
    "bitnet",
]
