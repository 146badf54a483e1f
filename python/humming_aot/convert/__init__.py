"""Checkpoint importers: each turns one quantization tool's tensors of a layer into the unified
``reference.QuantizedWeight``, bit for bit (codes, scales and zero points are moved, never
re-quantized).

* ``gptq``: GPTQ (AutoGPTQ / GPTQModel), v1 and v2 zero points, 2/3/4/8 bits, act-order.
* ``awq``: AWQ GEMM packing (4 bits, interleaved nibbles, integer zero points).
* ``compressed_tensors``: the ``pack-quantized`` compressor (int weights, group / channel / tensor /
  block strategies, act-order).

Each module has ``convert(...)`` (the layer's tensors as arguments) and ``convert_layer(tensors,
prefix, config)`` (a state dict and the layer's name). Both return a ``ConvertedWeight``:
``.weight`` is the ``QuantizedWeight``; ``.perm``, when not None, is the input permutation the
caller must apply to the activations (``x.index_select(-1, perm)``), see ``ConvertedWeight``.
A checkpoint the unified format cannot hold exactly raises ``ConversionError`` naming the layer,
the field and the value.
"""

from ._common import ConversionError, ConvertedWeight
from . import awq, compressed_tensors, gptq

__all__ = ["ConversionError", "ConvertedWeight", "gptq", "awq", "compressed_tensors"]
