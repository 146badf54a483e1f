"""BitNet b1.58 ternary checkpoints (``quant_method = "bitnet"`` in transformers, e.g.
microsoft/bitnet-b1.58-2B-4T) into the unified format.

Tensors of one linear layer with N outputs and K inputs (transformers ``integrations/bitnet.py``):

* ``weight`` uint8 [R, K] with ``R = ceil(N / 4)``: four 2-bit fields per byte, packed along N in
  planes, not neighbours: field ``i`` (bits ``2i .. 2i+1``) of row ``r`` is output ``i * R + r``
  (``pack_weights`` / ``unpack_weights``). A field holds the ternary value plus one (0, 1, 2).
  The ``autobitlinear`` offline variant may instead store the ternary values unpacked, as floats [N, K].
* ``weight_scale`` one value (the model dtype, shape [1]).

The value convention depends on the layer class (``linear_class`` in the config):

* ``bitlinear`` (the default, ``BitLinear``): the output is divided by ``weight_scale``
  (``post_quant_process``: ``y / (input_scale * weight_scale)``), so ``w = t / weight_scale``.
* ``autobitlinear`` (``AutoBitLinear``, offline): the output is multiplied: ``w = t * weight_scale``.

Ternary ``t`` in {-1, 0, 1} is a ``u2`` code with the implied zero 2 (code ``t + 2``, values -2..1 of
which only -1..1 occur), one scale per channel (the tensor's, repeated): ``u2gc-s{type}``. For
``autobitlinear`` the scale is copied (its dtype kept); for ``bitlinear`` it is ``1 / weight_scale``
rounded once to float32 (``u2gc-sf32``: exact when the scale is a power of two, otherwise within half
a float32 ulp). A field value of 3 (ternary 2) is refused.
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
    need_tensor,
    reciprocal_f32,
    scalar_f32,
    scale_type_name,
)

__all__ = ["convert", "convert_layer", "VALUES_PER_BYTE"]

VALUES_PER_BYTE = 4
_CLASSES = ("bitlinear", "autobitlinear")


def _unpack_planes(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [4 R, K] fields of a packed [R, K] tensor, plane i (bits 2i) giving rows i*R .. i*R+R-1."""
    return torch.cat([(packed >> (2 * i)) & 3 for i in range(VALUES_PER_BYTE)], dim=0)


def convert(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    *,
    out_features: int | None = None,
    linear_class: str = "bitlinear",
    layer: str = "",
) -> ConvertedWeight:
    """Convert one BitNet layer (see the module doc). ``out_features``: N (default ``4 * R`` for a
    packed weight, whose last rows are padding when N is not a multiple of 4)."""
    cls = str(linear_class).strip().lower()
    if cls not in _CLASSES:
        raise ConversionError(layer, "linear_class", linear_class, f"expected one of {', '.join(_CLASSES)}")
    need_tensor(weight, layer, "weight", ndim=2)
    if weight.dtype == torch.uint8:
        fields = _unpack_planes(weight)
        if out_features is not None:
            N = int(out_features)
            R = weight.shape[0]
            if not 4 * (R - 1) < N <= 4 * R:
                raise ConversionError(
                    layer,
                    "weight.shape",
                    list(weight.shape),
                    f"expected [ceil({N} / 4) = {-(-N // 4)}, K] for out_features = {N}",
                )
            fields = fields[:N]
        if int(fields.max()) > 2:
            raise ConversionError(
                layer, "weight", weight, "holds the 2-bit value 3 (ternary 2); BitNet fields are 0, 1, 2 (ternary + 1)"
            )
        codes = fields + 1  # ternary t = field - 1; the u2 code with implied zero 2 is t + 2
    elif weight.dtype.is_floating_point:
        if cls != "autobitlinear":
            raise ConversionError(
                layer,
                "weight.dtype",
                weight.dtype,
                "BitLinear checkpoints store packed uint8 weights; unpacked float ternary "
                "weights come with linear_class = 'autobitlinear'",
            )
        if not bool(((weight == -1) | (weight == 0) | (weight == 1)).all()):
            raise ConversionError(layer, "weight", weight, "unpacked BitNet weights must be -1, 0 or 1 (ternary)")
        if out_features is not None and int(out_features) != weight.shape[0]:
            raise ConversionError(layer, "weight.shape", list(weight.shape), f"expected {out_features} rows")
        codes = (weight.to(torch.int64) + 2).to(torch.uint8)
    else:
        raise ConversionError(layer, "weight.dtype", weight.dtype, "expected uint8 (packed) or float (ternary)")
    N = codes.shape[0]
    if cls == "bitlinear":
        scale = reciprocal_f32(weight_scale, layer, "weight_scale")
        st = "f32"
    else:
        scalar_f32(weight_scale, layer, "weight_scale")  # checks one positive finite value
        st = scale_type_name(weight_scale, layer, "weight_scale")
        scale = weight_scale.reshape(())
    scales = scale.reshape(1, 1).expand(N, 1).contiguous()
    return ConvertedWeight(QuantizedWeight(f"u2gc-s{st}", codes.contiguous(), scales), None, f"bitnet_{cls}")


def convert_layer(
    tensors: Mapping[str, torch.Tensor],
    prefix: str,
    config: Mapping[str, Any] | Any = None,
    *,
    out_features: int | None = None,
    layer: str | None = None,
) -> ConvertedWeight:
    """Convert ``{prefix}.weight`` + ``{prefix}.weight_scale`` with the BitNet quantization config
    (``linear_class``, ``quantization_mode``)."""
    layer = prefix if layer is None else layer
    method = config_value(config, "quant_method")
    if method is not None and str(method).lower() != "bitnet":
        raise ConversionError(layer, "quant_method", method, "this is the BitNet importer")
    mode = config_value(config, "quantization_mode", "offline")
    if str(mode).lower() != "offline":
        raise ConversionError(
            layer,
            "quantization_mode",
            mode,
            "online quantization keeps float weights and quantizes them at run time; "
            "there are no ternary codes to import",
        )
    return convert(
        get_tensor(tensors, prefix, "weight", layer),
        get_tensor(tensors, prefix, "weight_scale", layer),
        out_features=out_features,
        linear_class=config_value(config, "linear_class", "bitlinear"),
        layer=layer,
    )
