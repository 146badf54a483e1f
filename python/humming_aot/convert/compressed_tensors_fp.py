"""compressed-tensors checkpoints of the unpacked and FP4 compressors into the unified format:
``float-quantized`` (FP8), ``int-quantized`` / ``naive-quantized`` (int8 stored as int8),
``nvfp4-pack-quantized`` and ``mxfp4-pack-quantized``. (``pack-quantized`` is in
``compressed_tensors``; its ``convert_layer`` hands the formats here over to this module.)

compressed-tensors dequantizes ``(x_q - zero_point) * scale`` and, with a global scale,
``x_q * (scale / global_scale)`` (``quantization/lifecycle/forward.py``, ``_dequantize``).

float-quantized / int-quantized (``NaiveQuantizationCompressor``):

* ``weight`` [N, K] in the quantized type: float8_e4m3fn (``type = "float"``, 8 bits) or int8
  (``type = "int"``, 8 bits). Block strategies may pad the weight to whole blocks; the compressor then
  stores ``weight_shape_original`` (N, K) and the padding is cut here.
* ``weight_scale``: [N, 1] (channel), one value (tensor), [N, ceil(K / group_size)] (group),
  [ceil(N / bn), ceil(K / bk)] (block, ``block_structure = [bn, bk]``); float16 / bfloat16 / float32.
* ``weight_zero_point``: int8 only, asymmetric schemes; the same shape as the scales. FP8 is symmetric.

So FP8 becomes ``e4m3{gran}-s{type}`` and int8 ``i8{gran}-s{type}`` (the int8 byte is the two's
complement code), or ``u8{gran}-s{type}-zi`` for asymmetric int8 (code ``q + 128``, zero ``zp + 128``,
so ``code - zero = q - zp``).

nvfp4-pack-quantized / mxfp4-pack-quantized (``fp4_quantized.py``):

* ``weight_packed`` uint8 [N, K / 2]: element ``2j`` of a row in the low nibble of byte ``j``, ``2j+1``
  in the high nibble (``pack_fp4_to_uint8``), each nibble an e2m1 bit pattern.
* ``weight_scale``: NVFP4 float8_e4m3fn [N, K / 16] (strategy ``tensor_group``); MXFP4 uint8 [N, K / 32]
  e8m0 exponent bytes (``compress_scale`` stores ``127 + exponent``), value ``2**(byte - 127)``.
* ``weight_global_scale`` float32 [1], NVFP4 only: a divisor. The weight is
  ``e2m1(code) * weight_scale / weight_global_scale``.

NVFP4 becomes ``e2m1g16-se4m3-gs`` with ``global_scale = 1 / weight_global_scale`` rounded once to
float32 (the unified format multiplies; exact when the global scale is a power of two, otherwise
within half a float32 ulp: the only value here that is not a copy). MXFP4 becomes
``e2m1g32-se8m0``, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .. import formats as F
from ..reference import QuantizedWeight
from ._common import (
    ConversionError,
    ConvertedWeight,
    block_structure,
    config_value,
    e4m3_scales,
    e8m0_scales,
    fp8_codes,
    get_tensor,
    granularity,
    n_groups,
    need_shape,
    need_tensor,
    reciprocal_f32,
    scale_type_name,
    unpack_fp4,
)

__all__ = ["convert_unpacked", "convert_fp4", "convert_layer", "SUPPORTED_FORMATS"]

UNPACKED_FORMATS = ("float-quantized", "int-quantized", "naive-quantized")
FP4_FORMATS = ("nvfp4-pack-quantized", "mxfp4-pack-quantized")
SUPPORTED_FORMATS = UNPACKED_FORMATS + FP4_FORMATS
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _strategy(args, layer: str) -> str:
    strategy = config_value(args, "strategy")
    if strategy is None:  # compressed-tensors infers it from group_size
        gs = config_value(args, "group_size")
        return "tensor" if gs is None else ("channel" if gs == -1 else "group")
    return str(strategy).lower()


def _check_static(args, layer: str) -> None:
    dynamic = config_value(args, "dynamic", False)
    if dynamic not in (False, None):
        raise ConversionError(layer, "weights.dynamic", dynamic, "dynamic weights have no stored scales to import")


def _scales_for(strategy: str, args, scale: torch.Tensor, N: int, K: int, layer: str):
    """(granularity, scales [rows, cols]) of an unpacked layer's ``weight_scale``."""
    if strategy == "channel":
        if scale.numel() == N and scale.dim() == 1:  # some exporters drop the trailing 1
            scale = scale.reshape(N, 1)
        need_shape(scale, [N, 1], layer, "weight_scale", "one scale per output channel")
        return "gc", scale
    if strategy == "tensor":
        if scale.numel() != 1:
            raise ConversionError(layer, "weight_scale.shape", list(scale.shape), "the tensor strategy has one scale")
        return "gc", scale.reshape(1, 1).expand(N, 1)
    if strategy == "group":
        gs = config_value(args, "group_size")
        if gs is None or int(gs) <= 0:
            raise ConversionError(layer, "weights.group_size", gs, "the group strategy needs a positive group size")
        G = n_groups(K, int(gs))
        need_shape(scale, [N, G], layer, "weight_scale", f"N = {N} rows of ceil(K / group_size) = {G} groups")
        return granularity(int(gs), K, G, layer, "weights.group_size"), scale
    if strategy == "block":
        bn, bk = block_structure(args, layer)
        need_shape(
            scale, [-(-N // bn), -(-K // bk)], layer, "weight_scale", f"one scale per {bn} x {bk} block of [{N}, {K}]"
        )
        return f"g{bk}n{bn}", scale
    raise ConversionError(
        layer,
        "weights.strategy",
        strategy,
        "unpacked weights with strategy channel, tensor, group or block are supported",
    )


def convert_unpacked(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    *,
    args: Mapping[str, Any] | Any,
    weight_zero_point: torch.Tensor | None = None,
    weight_shape_original=None,
    weight_g_idx: torch.Tensor | None = None,
    compression_format: str = "float-quantized",
    layer: str = "",
) -> ConvertedWeight:
    """Convert one float-quantized (FP8) or int-quantized (int8) layer (see the module doc)."""
    cfmt = str(compression_format).strip().lower()
    if cfmt not in UNPACKED_FORMATS:
        raise ConversionError(
            layer, "format", compression_format, f"convert_unpacked handles {', '.join(UNPACKED_FORMATS)}"
        )
    _check_static(args, layer)
    qtype = str(config_value(args, "type", "int")).lower()
    bits = int(config_value(args, "num_bits", 8))
    if bits != 8:
        raise ConversionError(layer, "weights.num_bits", bits, f"{cfmt} weights are stored one per byte (8 bits)")
    need_tensor(weight, layer, "weight", ndim=2)
    if qtype == "float":
        codes, code = fp8_codes(weight, layer, "weight")
    elif qtype == "int":
        need_tensor(weight, layer, "weight", dtypes=(torch.int8,))
        codes, code = weight.contiguous().view(torch.uint8), "i8"
    else:
        raise ConversionError(layer, "weights.type", qtype, "expected int or float")
    if weight_shape_original is not None:  # block padding added by the compressor: cut it
        shp = weight_shape_original
        vals = shp.flatten().tolist() if isinstance(shp, torch.Tensor) else list(shp)
        if len(vals) != 2 or not (1 <= vals[0] <= codes.shape[0] and 1 <= vals[1] <= codes.shape[1]):
            raise ConversionError(
                layer,
                "weight_shape_original",
                shp,
                f"expected (N, K) within the stored [{codes.shape[0]}, {codes.shape[1]}]",
            )
        codes = codes[: int(vals[0]), : int(vals[1])]
    N, K = codes.shape
    need_tensor(weight_scale, layer, "weight_scale", dtypes=_FLOATS)
    st = scale_type_name(weight_scale, layer, "weight_scale")
    strategy = _strategy(args, layer)
    gran, scales = _scales_for(strategy, args, weight_scale, N, K, layer)
    if weight_g_idx is not None and not bool((weight_g_idx == -1).all()):
        raise ConversionError(
            layer, "weight_g_idx", weight_g_idx, "activation ordering is not imported for unpacked weights"
        )
    symmetric = bool(config_value(args, "symmetric", True))
    zeros = None
    if weight_zero_point is not None:
        need_tensor(weight_zero_point, layer, "weight_zero_point")
        zp = weight_zero_point
        if zp.numel() == 1 and strategy == "tensor":
            zp = zp.reshape(1, 1).expand(N, 1)
        elif strategy == "channel" and zp.dim() == 1:
            zp = zp.reshape(-1, 1)
        need_shape(zp, list(scales.shape), layer, "weight_zero_point", "one zero point per scale")
        if zp.dtype.is_floating_point and not bool((zp == zp.round()).all()):
            raise ConversionError(layer, "weight_zero_point", weight_zero_point, "zero points must be integers")
        zv = zp.to(torch.int64)
        if bool((zv == 0).all()):
            pass  # a symmetric layer that stored its zeros
        elif code != "i8":
            raise ConversionError(
                layer,
                "weight_zero_point",
                weight_zero_point,
                "FP8 weights are symmetric; nonzero zero points cannot be represented",
            )
        elif int(zv.min()) < -128 or int(zv.max()) > 127:
            bad = int(zv.min()) if int(zv.min()) < -128 else int(zv.max())
            raise ConversionError(
                layer, "weight_zero_point", weight_zero_point, f"holds {bad}, outside the int8 range -128..127"
            )
        else:
            zeros = (zv + 128).to(torch.uint8).contiguous()
    elif not symmetric and code == "i8":
        raise ConversionError(
            layer,
            "weight_zero_point",
            None,
            "the scheme is asymmetric (symmetric = false) and needs zero points; missing",
        )
    if zeros is not None:
        # (q - zp) with signed q, zp equals (u - uz) with u = q + 128, uz = zp + 128: flipping the top
        # bit of the two's complement byte adds 128.
        codes = codes ^ 0x80
        fmt = f"u8{gran}-s{st}-zi"
    else:
        fmt = f"{code}{gran}-s{st}"
    q = QuantizedWeight(fmt, codes.contiguous(), scales.contiguous(), zeros)
    return ConvertedWeight(q, None, f"compressed_tensors_{cfmt}")


def convert_fp4(
    weight_packed: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_global_scale: torch.Tensor | None = None,
    *,
    args: Mapping[str, Any] | Any = None,
    compression_format: str = "nvfp4-pack-quantized",
    layer: str = "",
) -> ConvertedWeight:
    """Convert one nvfp4-pack-quantized or mxfp4-pack-quantized layer (see the module doc)."""
    cfmt = str(compression_format).strip().lower()
    if cfmt not in FP4_FORMATS:
        raise ConversionError(layer, "format", compression_format, f"convert_fp4 handles {', '.join(FP4_FORMATS)}")
    nv = cfmt.startswith("nvfp4")
    if args is not None:
        _check_static(args, layer)
        qtype = str(config_value(args, "type", "float")).lower()
        bits = int(config_value(args, "num_bits", 4))
        if (qtype, bits) != ("float", 4):
            raise ConversionError(layer, "weights.type/num_bits", f"{qtype}/{bits}", f"{cfmt} weights are 4-bit floats")
        if not bool(config_value(args, "symmetric", True)):
            raise ConversionError(layer, "weights.symmetric", False, "FP4 weights are symmetric")
    gs = 16 if nv else 32
    if args is not None:
        want = config_value(args, "group_size", gs)
        if int(want) != gs:
            raise ConversionError(
                layer,
                "weights.group_size",
                want,
                f"{cfmt} has groups of {gs} (the unified {'NVFP4' if nv else 'MXFP4'} format)",
            )
    need_tensor(weight_packed, layer, "weight_packed", dtypes=(torch.uint8,), ndim=2)
    N = weight_packed.shape[0]
    codes = unpack_fp4(weight_packed, layer, "weight_packed")
    K = codes.shape[1]
    if nv:
        scales = e4m3_scales(weight_scale, layer, "weight_scale")
    else:
        scales = e8m0_scales(weight_scale, layer, "weight_scale")
        need_tensor(scales, layer, "weight_scale", ndim=2)
    need_shape(scales, [N, -(-K // gs)], layer, "weight_scale", f"one scale per {gs} inputs of the [{N}, {K}] weight")
    if not nv:
        if weight_global_scale is not None:
            raise ConversionError(
                layer,
                "weight_global_scale",
                weight_global_scale,
                "MXFP4 has no global scale; a checkpoint with one is not mxfp4-pack-quantized",
            )
        return ConvertedWeight(QuantizedWeight("e2m1g32-se8m0", codes, scales), None, f"compressed_tensors_{cfmt}")
    if weight_global_scale is None:
        raise ConversionError(layer, "weight_global_scale", None, "NVFP4 needs its global scale; missing")
    g = reciprocal_f32(weight_global_scale, layer, "weight_global_scale")
    q = QuantizedWeight("e2m1g16-se4m3-gs", codes, scales, None, g)
    return ConvertedWeight(q, None, f"compressed_tensors_{cfmt}")


def convert_layer(
    tensors: Mapping[str, torch.Tensor],
    prefix: str,
    scheme: Mapping[str, Any] | Any,
    *,
    compression_format: str | None = None,
    layer: str | None = None,
) -> ConvertedWeight:
    """Convert the layer ``prefix`` of a compressed-tensors state dict stored by one of this module's
    compressors. ``scheme``: the config group (with ``weights`` and maybe ``format``) or its weight
    arguments; ``compression_format`` overrides the group's ``format``."""
    layer = prefix if layer is None else layer
    args = config_value(scheme, "weights", scheme)
    if compression_format is None:
        compression_format = config_value(scheme, "format")
    if compression_format is None:
        raise ConversionError(layer, "format", None, f"the compressor is needed: one of {', '.join(SUPPORTED_FORMATS)}")
    cfmt = str(compression_format).strip().lower()
    get = lambda name, required=False: get_tensor(tensors, prefix, name, layer, required)  # noqa: E731
    if cfmt in FP4_FORMATS:
        return convert_fp4(
            get("weight_packed", True),
            get("weight_scale", True),
            get("weight_global_scale"),
            args=args,
            compression_format=cfmt,
            layer=layer,
        )
    if cfmt in UNPACKED_FORMATS:
        return convert_unpacked(
            get("weight", True),
            get("weight_scale", True),
            args=args,
            weight_zero_point=get("weight_zero_point"),
            weight_shape_original=get("weight_shape_original"),
            weight_g_idx=get("weight_g_idx"),
            compression_format=cfmt,
            layer=layer,
        )
    raise ConversionError(
        layer,
        "format",
        compression_format,
        f"this importer handles the compressed-tensors formats {', '.join(SUPPORTED_FORMATS)}",
    )
