"""FP8 checkpoints with block scales named ``weight_scale_inv`` (DeepSeek-V3 / R1, Qwen3-FP8 and the
other ``quant_method = "fp8"`` checkpoints with ``weight_block_size``) into the unified format.

Tensors of one linear layer with N outputs and K inputs, blocks of ``bn x bk`` (``weight_block_size
= [bn, bk]``, [128, 128] in practice):

* ``weight`` float8_e4m3fn [N, K]: the codes.
* ``weight_scale_inv`` float32 [ceil(N / bn), ceil(K / bk)]: one scale per block; the last block row
  and column may be partial.

Despite the name the stored value multiplies: DeepSeek-V3's ``inference/kernel.py``
(``weight_dequant``) computes ``y = x * s`` per 128 x 128 block, and vLLM's block-FP8 linear passes
``weight_scale_inv`` as the weight scale of its scaled GEMM. So the weight is
``w[n, k] = fp8(weight[n, k]) * weight_scale_inv[n // bn, k // bk]``, which is the unified
``e4m3g{bk}n{bn}-s{type}`` (``e4m3g128n128-sf32``) with the bytes and the scales moved as they are.

A checkpoint of the same method without ``weight_block_size`` has one per-tensor ``weight_scale``
(or ``weight_scale_inv``); it becomes ``e4m3gc-s{type}`` with that scale repeated per channel, exactly.
Block sizes the unified format cannot hold (not powers of two from 8 to 4096) are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..reference import QuantizedWeight
from ._common import (
    ConversionError,
    ConvertedWeight,
    block_pair,
    config_value,
    fp8_codes,
    get_tensor,
    need_shape,
    need_tensor,
    scale_type_name,
)

__all__ = ["convert", "convert_layer"]


def _block(block_size, layer: str) -> tuple[int, int]:
    return block_pair(block_size, layer, "weight_block_size", "[block_n, block_k]")


def convert(
    weight: torch.Tensor, weight_scale_inv: torch.Tensor, *, block_size=(128, 128), layer: str = ""
) -> ConvertedWeight:
    """Convert one FP8 layer (see the module doc). ``block_size``: ``[bn, bk]`` or None for a
    per-tensor scale."""
    codes, code = fp8_codes(weight, layer, "weight")
    N, K = codes.shape
    need_tensor(weight_scale_inv, layer, "weight_scale_inv")
    st = scale_type_name(weight_scale_inv, layer, "weight_scale_inv")
    if block_size is None:
        if weight_scale_inv.numel() != 1:
            raise ConversionError(
                layer,
                "weight_scale_inv.shape",
                list(weight_scale_inv.shape),
                "without weight_block_size the scale is one value per tensor",
            )
        scales = weight_scale_inv.reshape(1, 1).expand(N, 1).contiguous()
        return ConvertedWeight(QuantizedWeight(f"{code}gc-s{st}", codes, scales), None, "fp8_tensor")
    bn, bk = _block(block_size, layer)
    need_tensor(weight_scale_inv, layer, "weight_scale_inv", ndim=2)
    need_shape(
        weight_scale_inv,
        [-(-N // bn), -(-K // bk)],
        layer,
        "weight_scale_inv",
        f"one scale per {bn} x {bk} block of the [{N}, {K}] weight",
    )
    q = QuantizedWeight(f"{code}g{bk}n{bn}-s{st}", codes, weight_scale_inv.contiguous())
    return ConvertedWeight(q, None, "fp8_block")


def convert_layer(
    tensors: Mapping[str, torch.Tensor], prefix: str, config: Mapping[str, Any] | Any, *, layer: str | None = None
) -> ConvertedWeight:
    """Convert the layer ``prefix`` (``{prefix}.weight``, ``{prefix}.weight_scale_inv``) with the
    checkpoint's ``quantization_config`` (``quant_method = "fp8"``, ``fmt = "e4m3"``,
    ``weight_block_size``)."""
    layer = prefix if layer is None else layer
    method = config_value(config, "quant_method")
    if method is not None and str(method).lower() != "fp8":
        raise ConversionError(layer, "quant_method", method, "this is the FP8 (weight_scale_inv) importer")
    fmt = config_value(config, "fmt", "e4m3")
    if str(fmt).lower() not in ("e4m3", "float8_e4m3fn"):
        raise ConversionError(layer, "fmt", fmt, "FP8 block checkpoints store e4m3 weights")
    block = config_value(config, "weight_block_size")
    weight = get_tensor(tensors, prefix, "weight", layer)
    scale = get_tensor(tensors, prefix, "weight_scale_inv", layer, required=block is not None)
    if scale is None:
        scale = get_tensor(tensors, prefix, "weight_scale", layer)
    return convert(weight, scale, block_size=block, layer=layer)
