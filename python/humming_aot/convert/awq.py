"""AWQ checkpoints (AutoAWQ / llm-awq "GEMM" version, as transformers and vLLM load them) into the
unified format.

Tensors of one linear layer with K inputs, N outputs and ``G = K / group_size`` groups, 4 bits:

* ``qweight`` int32 [K, N/8]: the codes of 8 consecutive outputs ``8c .. 8c+7`` of input ``k`` in
  word ``[k, c]``, interleaved: the nibble at bits ``4i .. 4i+3`` holds output ``8c + ORDER[i]``
  with ``ORDER = (0, 2, 4, 6, 1, 3, 5, 7)`` (so outputs 0..7 sit in nibbles 0, 4, 1, 5, 2, 6, 3, 7).
* ``qzeros`` int32 [G, N/8]: the zero points, packed and interleaved the same way.
* ``scales`` float16 [G, N].

The weight is ``w[n, k] = scales[g, n] * (code[k, n] - zero[g, n])`` with ``g = k // group_size``;
zero points are stored as they are (no minus one, unlike GPTQ v1). AWQ is asymmetric, so a layer
becomes ``u4g{group_size}-s{type}-zi`` (``gc`` for ``group_size = -1``), bit for bit. There is no
act-order in AWQ: the result's ``perm`` is always None.

Only the GEMM packing is supported; the ``gemv`` / ``gemv_fast`` / ``marlin`` / ``exllama`` versions
and bit widths other than 4 are refused with an error naming the setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..reference import QuantizedWeight
from ._common import (
    ConversionError,
    ConvertedWeight,
    config_value,
    get_tensor,
    granularity,
    n_groups,
    need_shape,
    need_tensor,
    scale_type_name,
    unpack_words,
)

__all__ = ["convert", "convert_layer", "ORDER"]

ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # output (within a word's 8) held by nibble i
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _deinterleave(words: torch.Tensor, count: int) -> torch.Tensor:
    """uint8 [R, count] codes of AWQ-interleaved int32 words [R, count/8]."""
    seq = unpack_words(words, 4, words.shape[1] * 8, dim=1)  # position 8c + i = nibble i of word c
    slot = [0] * 8
    for nibble, out in enumerate(ORDER):
        slot[out] = nibble  # output 8c + out is at position 8c + slot[out]
    cols = torch.arange(words.shape[1] * 8, device=words.device)
    src = cols - cols % 8 + torch.tensor(slot, device=words.device)[cols % 8]
    return seq.index_select(1, src)[:, :count]


def convert(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    *,
    group_size: int,
    bits: int = 4,
    version: str = "gemm",
    layer: str = "",
) -> ConvertedWeight:
    """Convert one AWQ GEMM layer (see the module doc) to a ``ConvertedWeight``."""
    if bits != 4:
        raise ConversionError(layer, "bits", bits, "AWQ GEMM checkpoints are 4-bit (8 codes per int32)")
    if str(version).strip().lower() != "gemm":
        raise ConversionError(
            layer, "version", version, "only the AWQ GEMM packing ([K, N/8] interleaved) is supported"
        )
    need_tensor(qweight, layer, "qweight", dtypes=(torch.int32,), ndim=2)
    need_tensor(qzeros, layer, "qzeros", dtypes=(torch.int32,), ndim=2)
    need_tensor(scales, layer, "scales", dtypes=_FLOATS, ndim=2)
    st = scale_type_name(scales, layer, "scales")
    K = qweight.shape[0]
    N = scales.shape[1]
    if K < 1 or N < 1:
        raise ConversionError(layer, "qweight.shape", list(qweight.shape), "empty layer")
    if N % 8:
        raise ConversionError(
            layer,
            "scales.shape",
            list(scales.shape),
            f"N = {N} outputs is not a multiple of 8, which AWQ GEMM packing needs",
        )
    need_shape(qweight, [K, N // 8], layer, "qweight", f"K = {K} rows of N/8 words for N = {N} from scales")
    if group_size is None:
        raise ConversionError(layer, "group_size", None, "AWQ needs group_size (-1 for per channel)")
    group_size = int(group_size)
    G = n_groups(K, group_size)
    need_shape(scales, [G, N], layer, "scales", f"ceil(K / group_size) = {G} groups of N outputs")
    need_shape(qzeros, [G, N // 8], layer, "qzeros", f"{G} groups of N/8 words")
    gran = granularity(group_size, K, G, layer, "group_size")
    codes = _deinterleave(qweight, N).t().contiguous()  # [N, K]
    zeros = _deinterleave(qzeros, N).t().contiguous()  # [N, G]
    q = QuantizedWeight(f"u4{gran}-s{st}-zi", codes, scales.t().contiguous(), zeros)
    return ConvertedWeight(q, None, "awq_gemm")


def convert_layer(
    tensors: Mapping[str, torch.Tensor], prefix: str, config: Mapping[str, Any] | Any, *, layer: str | None = None
) -> ConvertedWeight:
    """Convert the layer ``prefix`` of an AWQ state dict (``{prefix}.qweight``, ``.qzeros``,
    ``.scales``) with its quantization config: transformers' keys ``bits``, ``group_size``,
    ``zero_point``, ``version`` or AutoAWQ's ``w_bit``, ``q_group_size``."""
    layer = prefix if layer is None else layer
    method = config_value(config, ("quant_method", "method"))
    if method is not None and str(method).lower() != "awq":
        raise ConversionError(layer, "quant_method", method, "this is the AWQ importer")
    bits = config_value(config, ("bits", "w_bit"), 4)
    group_size = config_value(config, ("group_size", "q_group_size"))
    if group_size is None:
        raise ConversionError(layer, "group_size", None, "the quantization config has no group_size")
    version = config_value(config, ("version", "format"), "gemm")
    if config_value(config, "zero_point", True) is False:
        raise ConversionError(
            layer,
            "zero_point",
            False,
            "AWQ GEMM layers always carry zero points; a checkpoint without them is not one this importer knows",
        )
    return convert(
        get_tensor(tensors, prefix, "qweight", layer),
        get_tensor(tensors, prefix, "qzeros", layer),
        get_tensor(tensors, prefix, "scales", layer),
        group_size=int(group_size),
        bits=int(bits),
        version=version,
        layer=layer,
    )
