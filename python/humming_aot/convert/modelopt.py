"""NVIDIA ModelOpt (TensorRT Model Optimizer) checkpoints, as exported for vLLM / TensorRT-LLM /
SGLang (``quant_method = "modelopt"`` or ``hf_quant_config.json``), into the unified format.

NVFP4 (``quant_algo = "NVFP4"``), one linear layer with N outputs and K inputs:

* ``weight`` uint8 [N, K / 2]: two e2m1 codes per byte, element ``2j`` of a row in the low nibble of
  byte ``j`` and ``2j + 1`` in the high nibble (``NVFP4QTensor.quantize`` packs
  ``(q[..., 1::2] << 4) | q[..., 0::2]``).
* ``weight_scale`` float8_e4m3fn [N, K / 16]: one scale per 16 inputs.
* ``weight_scale_2`` float32 scalar: the per-tensor scale, ``amax / (6 * 448)``. Unlike
  compressed-tensors' ``weight_global_scale`` it multiplies: ``NVFP4QTensor.dequantize`` computes
  ``e2m1(code) * (weight_scale * weight_scale_2)``.
* ``input_scale`` float32 scalar: the static activation scale (of the A4 GEMM); not part of the
  weight, so it is only checked here and left to the caller (``activation_scale``).

So NVFP4 is ``e2m1g16-se4m3-gs`` with ``global_scale = weight_scale_2``, every byte kept.

FP8 (``quant_algo = "FP8"``, and ``FP8_PER_CHANNEL_PER_TOKEN``): ``weight`` float8_e4m3fn [N, K],
``weight_scale`` float32, one value (per tensor) or [N] / [N, 1] (per channel); the weight is
``fp8(weight) * weight_scale``: ``e4m3gc-sf32`` (a per-tensor scale repeated per channel, exactly).
Block FP8 (``FP8_PB_WO``) with [ceil(N / bn), ceil(K / bk)] scales becomes ``e4m3g{bk}n{bn}-sf32``.

Refused with an error naming the setting: other algorithms (``NVFP4_AWQ`` needs its
``pre_quant_scale`` folded into the previous layer, ``W4A8_*``, ``INT4_AWQ``, ``INT8_SQ``, ``MXFP8``:
not imported here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..reference import QuantizedWeight
from . import fp8_block
from ._common import (
    ConversionError,
    ConvertedWeight,
    config_value,
    e4m3_scales,
    fp8_codes,
    get_tensor,
    need_shape,
    need_tensor,
    scalar_f32,
    scale_type_name,
    unpack_fp4,
)

__all__ = ["convert_nvfp4", "convert_fp8", "convert_layer", "activation_scale"]

SUPPORTED_ALGOS = ("NVFP4", "FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO")


def convert_nvfp4(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_scale_2: torch.Tensor,
    *,
    group_size: int = 16,
    layer: str = "",
) -> ConvertedWeight:
    """Convert one ModelOpt NVFP4 layer (see the module doc)."""
    if int(group_size) != 16:
        raise ConversionError(layer, "group_size", group_size, "NVFP4 has groups of 16 inputs")
    need_tensor(weight, layer, "weight", dtypes=(torch.uint8,), ndim=2)
    codes = unpack_fp4(weight, layer, "weight")
    N, K = codes.shape
    scales = e4m3_scales(weight_scale, layer, "weight_scale")
    need_shape(scales, [N, -(-K // 16)], layer, "weight_scale", f"one scale per 16 inputs of the [{N}, {K}] weight")
    g = scalar_f32(weight_scale_2, layer, "weight_scale_2")
    return ConvertedWeight(QuantizedWeight("e2m1g16-se4m3-gs", codes, scales, None, g), None, "modelopt_nvfp4")


def convert_fp8(
    weight: torch.Tensor, weight_scale: torch.Tensor, *, block_size=None, layer: str = ""
) -> ConvertedWeight:
    """Convert one ModelOpt FP8 layer: per-tensor or per-channel ``weight_scale``, or blocks when
    ``block_size = [bn, bk]``."""
    if block_size is not None:
        res = fp8_block.convert(weight, weight_scale, block_size=block_size, layer=layer)
        return ConvertedWeight(res.weight, None, "modelopt_fp8_block")
    codes, code = fp8_codes(weight, layer, "weight")
    N, K = codes.shape
    need_tensor(weight_scale, layer, "weight_scale")
    st = scale_type_name(weight_scale, layer, "weight_scale")
    if weight_scale.numel() == 1:
        scales = weight_scale.reshape(1, 1).expand(N, 1)
    elif weight_scale.numel() == N and weight_scale.dim() in (1, 2) and weight_scale.shape[0] == N:
        scales = weight_scale.reshape(N, 1)
    else:
        raise ConversionError(
            layer,
            "weight_scale.shape",
            list(weight_scale.shape),
            f"expected one value (per tensor) or [{N}] / [{N}, 1] (per channel)",
        )
    return ConvertedWeight(QuantizedWeight(f"{code}gc-s{st}", codes, scales.contiguous()), None, "modelopt_fp8")


def _algo(config, layer: str) -> str:
    # hf_quant_config.json nests the settings under "quantization"; config.json's
    # quantization_config has them at the top level.
    inner = config_value(config, "quantization", config)
    method = config_value(config, "quant_method")
    if method is not None and str(method).lower() not in ("modelopt", "modelopt_fp4"):
        raise ConversionError(layer, "quant_method", method, "this is the ModelOpt importer")
    algo = config_value(inner, "quant_algo")
    if algo is None:
        raise ConversionError(
            layer, "quant_algo", None, f"the quantization algorithm is needed: {', '.join(SUPPORTED_ALGOS)}"
        )
    algo = str(algo).upper()
    if algo not in SUPPORTED_ALGOS:
        raise ConversionError(
            layer, "quant_algo", algo, f"this importer handles the ModelOpt algorithms {', '.join(SUPPORTED_ALGOS)}"
        )
    return algo


def convert_layer(
    tensors: Mapping[str, torch.Tensor], prefix: str, config: Mapping[str, Any] | Any, *, layer: str | None = None
) -> ConvertedWeight:
    """Convert the layer ``prefix`` (``.weight``, ``.weight_scale``, ``.weight_scale_2``) with the
    ModelOpt config (``hf_quant_config.json`` or ``config.json``'s ``quantization_config``)."""
    layer = prefix if layer is None else layer
    algo = _algo(config, layer)
    inner = config_value(config, "quantization", config)
    get = lambda name, required=True: get_tensor(tensors, prefix, name, layer, required)  # noqa: E731
    if get("pre_quant_scale", False) is not None:
        raise ConversionError(
            layer,
            f"{prefix}.pre_quant_scale",
            get("pre_quant_scale"),
            "an AWQ pre-quantization scale multiplies the activations; fold it into the "
            "previous layer first (not done by this importer)",
        )
    if algo == "NVFP4":
        return convert_nvfp4(
            get("weight"),
            get("weight_scale"),
            get("weight_scale_2"),
            group_size=config_value(inner, "group_size", 16),
            layer=layer,
        )
    block = None
    if algo == "FP8_PB_WO":
        block = config_value(inner, ("block_size", "weight_block_size"), [128, 128])
    return convert_fp8(get("weight"), get("weight_scale"), block_size=block, layer=layer)


def activation_scale(tensors: Mapping[str, torch.Tensor], prefix: str, *, layer: str | None = None):
    """The layer's static ``input_scale`` as a float32 scalar, or None when the checkpoint has none."""
    layer = prefix if layer is None else layer
    t = get_tensor(tensors, prefix, "input_scale", layer, required=False)
    return None if t is None else scalar_f32(t, layer, f"{prefix}.input_scale")
