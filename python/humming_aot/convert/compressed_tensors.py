"""compressed-tensors checkpoints (llm-compressor, vLLM's "compressed-tensors" method) into the
unified format: the ``pack-quantized`` compressor with integer weights (W4A16 / W8A16 and the like).

Tensors of one linear layer with N outputs and K inputs, ``b = num_bits`` (1..8), ``p = 32 // b``
codes per int32:

* ``weight_packed`` int32 [N, ceil(K / p)]: along K, ``p`` codes per word, LSB first, code ``k`` at
  bits ``b * (k % p)`` of word ``k // p`` (a code never straddles words; for 3 bits the top two bits
  of each word are unused). A stored code is the signed quantized value plus ``2**(b-1)``, so it is
  an unsigned ``b``-bit code.
* ``weight_scale`` [N, G] for strategy ``group`` (``G = ceil(K / group_size)``), [N, 1] for
  ``channel``, one value ([], [1] or [1, 1]) for ``tensor``, [N / rows, K / cols] for ``block`` with
  ``block_structure = [rows, cols]``; in the model's dtype (bf16 / fp16 / fp32), kept as it is.
* ``weight_zero_point``, asymmetric only: for ``group`` / ``channel`` int32 [ceil(N / p), G] packed the
  same way along N (stored unsigned, value plus ``2**(b-1)``); for ``tensor`` / ``block`` unpacked
  signed integers shaped like the scales. Symmetric layers store none (the zero is 0).
* ``weight_g_idx`` int32 [K], optional (``actorder = "group"``): the group of each input; entries of
  -1 mean "not set" (column order).
* ``weight_shape`` [2]: (N, K).

compressed-tensors dequantizes ``(q - zp) * scale`` with signed ``q`` and ``zp``; with the stored
unsigned ``u = q + 2**(b-1)`` and ``uz = zp + 2**(b-1)`` that is ``(u - uz) * scale``. So a symmetric
layer is ``u{b}{gran}-s{type}`` (implied zero ``2**(b-1)``) and an asymmetric one
``u{b}{gran}-s{type}-zi`` with ``zero = uz``; granularity ``g{group_size}``, ``gc`` (channel and
tensor; a tensor scale is repeated per channel, exactly), or ``g{cols}n{rows}`` for blocks. Act-order
groups are made K-contiguous by a permutation returned as ``ConvertedWeight.perm`` (apply it to the
activations: ``x.index_select(-1, perm)``).

``convert_layer`` hands the ``float-quantized``, ``int-quantized``, ``naive-quantized``,
``nvfp4-pack-quantized`` and ``mxfp4-pack-quantized`` compressors over to ``compressed_tensors_fp``.
Refused with an error naming the setting: other compressors (``marlin-24``, sparse ones),
``type = "float"`` in pack-quantized, dynamic weights, the
``tensor_group`` / ``token`` / ``attn_head`` strategies, group or block sizes the unified format
cannot hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .. import formats as F
from ..reference import QuantizedWeight
from . import compressed_tensors_fp
from ._common import (
    ConversionError,
    ConvertedWeight,
    block_structure,
    config_value,
    get_tensor,
    granularity,
    n_groups,
    need_shape,
    need_tensor,
    scale_type_name,
    sort_groups,
    unpack_words,
)

__all__ = ["convert", "convert_layer", "SUPPORTED_FORMATS"]

SUPPORTED_FORMATS = ("pack-quantized",)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _strategy(args, layer: str) -> str:
    strategy = config_value(args, "strategy")
    group_size = config_value(args, "group_size")
    if strategy is None:  # compressed-tensors' own inference from group_size
        if group_size is None:
            return "tensor"
        if group_size == -1:
            return "channel"
        if group_size > 0:
            return "group"
        raise ConversionError(layer, "group_size", group_size, "use a positive group size or -1 (channel)")
    return str(strategy).lower()


def _shape(weight_shape, layer: str) -> tuple[int, int]:
    if weight_shape is None:
        raise ConversionError(
            layer, "weight_shape", None, "the logical (N, K) shape is needed to cut the packing padding"
        )
    if isinstance(weight_shape, torch.Tensor):
        vals = weight_shape.flatten().tolist()
    elif isinstance(weight_shape, Sequence):
        vals = list(weight_shape)
    else:
        raise ConversionError(layer, "weight_shape", weight_shape, "expected (N, K)")
    if len(vals) != 2 or any(int(v) != v or v < 1 for v in vals):
        raise ConversionError(layer, "weight_shape", weight_shape, "expected two positive integers (N, K)")
    return int(vals[0]), int(vals[1])


def _int_values(t: torch.Tensor, layer: str, field: str) -> torch.Tensor:
    """int64 values of an unpacked zero-point tensor (integer dtype, or a float holding integers)."""
    if t.dtype in _INTS:
        return t.to(torch.int64)
    if t.dtype.is_floating_point and bool((t == t.round()).all()):
        return t.to(torch.int64)
    raise ConversionError(layer, f"{field}.dtype", t.dtype, "zero points must be integers")


def convert(
    weight_packed: torch.Tensor,
    weight_scale: torch.Tensor,
    *,
    args: Mapping[str, Any] | Any,
    weight_shape=None,
    weight_zero_point: torch.Tensor | None = None,
    weight_g_idx: torch.Tensor | None = None,
    compression_format: str = "pack-quantized",
    layer: str = "",
) -> ConvertedWeight:
    """Convert one pack-quantized layer (see the module doc) to a ``ConvertedWeight``.

    ``args``: the scheme's weight ``QuantizationArgs`` (a dict as in ``config.json``, or the object):
    ``num_bits``, ``type``, ``symmetric``, ``strategy``, ``group_size``, ``block_structure``,
    ``dynamic``, ``actorder``.
    """
    cfmt = str(compression_format).strip().lower()
    if cfmt not in SUPPORTED_FORMATS:
        raise ConversionError(
            layer,
            "format",
            compression_format,
            f"this importer handles the compressed-tensors formats {', '.join(SUPPORTED_FORMATS)}",
        )
    qtype = str(config_value(args, "type", "int")).lower()
    if qtype != "int":
        raise ConversionError(layer, "weights.type", qtype, "pack-quantized weights are integers (type int)")
    bits = int(config_value(args, "num_bits", 8))
    if not 1 <= bits <= 8:
        raise ConversionError(layer, "weights.num_bits", bits, "pack-quantized codes have 1 to 8 bits")
    dynamic = config_value(args, "dynamic", False)
    if dynamic not in (False, None):
        raise ConversionError(layer, "weights.dynamic", dynamic, "dynamic weights have no stored scales to import")
    symmetric = bool(config_value(args, "symmetric", True))
    strategy = _strategy(args, layer)

    N, K = _shape(weight_shape, layer)
    p = 32 // bits
    need_tensor(weight_packed, layer, "weight_packed", dtypes=(torch.int32,), ndim=2)
    need_shape(weight_packed, [N, -(-K // p)], layer, "weight_packed", f"N = {N} rows of K = {K} codes, {p} per int32")
    need_tensor(weight_scale, layer, "weight_scale", dtypes=_FLOATS)
    st = scale_type_name(weight_scale, layer, "weight_scale")

    group_size = None
    if strategy == "group":
        group_size = config_value(args, "group_size")
        if group_size is None or int(group_size) <= 0:
            raise ConversionError(
                layer, "weights.group_size", group_size, "the group strategy needs a positive group size"
            )
        group_size = int(group_size)
        G = n_groups(K, group_size)
        need_shape(weight_scale, [N, G], layer, "weight_scale", f"N = {N} rows of ceil(K / group_size) = {G} groups")
        gran = granularity(group_size, K, G, layer, "weights.group_size")
        scales = weight_scale
    elif strategy == "channel":
        need_shape(weight_scale, [N, 1], layer, "weight_scale", "one scale per output channel")
        gran, scales = "gc", weight_scale
    elif strategy == "tensor":
        if weight_scale.numel() != 1:
            raise ConversionError(
                layer, "weight_scale.shape", list(weight_scale.shape), "the tensor strategy has one scale"
            )
        gran, scales = "gc", weight_scale.reshape(1, 1).expand(N, 1)
    elif strategy == "block":
        bn, bk = block_structure(args, layer)
        need_shape(
            weight_scale,
            [-(-N // bn), -(-K // bk)],
            layer,
            "weight_scale",
            f"one scale per {bn} x {bk} block of [{N}, {K}]",
        )
        gran, scales = f"g{bk}n{bn}", weight_scale
    else:
        raise ConversionError(
            layer,
            "weights.strategy",
            strategy,
            "pack-quantized integer weights with strategy group, channel, tensor or block are supported",
        )

    codes = unpack_words(weight_packed, bits, K, dim=1)  # [N, K], unsigned (value + 2**(b-1))
    mid = 1 << (bits - 1)
    top = (1 << bits) - 1
    rows, cols = scales.shape
    packed_zp = strategy in ("group", "channel")
    zeros = None
    zp = weight_zero_point
    if zp is not None:
        need_tensor(zp, layer, "weight_zero_point")
        if packed_zp:
            need_tensor(zp, layer, "weight_zero_point", dtypes=(torch.int32,), ndim=2)
            need_shape(
                zp,
                [-(-N // p), cols],
                layer,
                "weight_zero_point",
                f"N = {N} zero points of {bits} bits packed along N, {p} per int32, for {cols} groups",
            )
            unsigned = unpack_words(zp, bits, N, dim=0)  # [N, cols]
        else:
            v = _int_values(zp, layer, "weight_zero_point")
            if strategy == "tensor":
                if v.numel() != 1:
                    raise ConversionError(layer, "weight_zero_point.shape", list(zp.shape), "one zero point per tensor")
                v = v.reshape(1, 1).expand(N, 1)
            else:
                need_shape(zp, [rows, cols], layer, "weight_zero_point", "one zero point per scale")
            if int(v.min()) < -mid or int(v.max()) > mid - 1:
                bad = int(v.min()) if int(v.min()) < -mid else int(v.max())
                raise ConversionError(
                    layer,
                    "weight_zero_point",
                    zp,
                    f"holds {bad}, outside the signed {bits}-bit range {-mid}..{mid - 1}",
                )
            unsigned = (v + mid).to(torch.uint8)
        if symmetric:
            if not bool((unsigned == mid).all()):
                raise ConversionError(
                    layer, "weight_zero_point", zp, "the scheme is symmetric but the stored zero points are not all 0"
                )
        else:
            zeros = unsigned.contiguous()
    elif not symmetric:
        raise ConversionError(
            layer,
            "weight_zero_point",
            None,
            "the scheme is asymmetric (symmetric = false) and needs zero points; missing",
        )
    assert zeros is None or int(zeros.max()) <= top

    perm = None
    actorder = config_value(args, "actorder")
    if weight_g_idx is None and str(actorder).lower() in ("group", "dynamic", "true"):
        raise ConversionError(
            layer,
            "weight_g_idx",
            None,
            f"actorder = {actorder!r} reorders the groups, so the input-to-group map "
            "weight_g_idx is needed, and it is missing",
        )
    if weight_g_idx is not None:
        g = need_tensor(weight_g_idx, layer, "weight_g_idx", ndim=1)
        if strategy != "group":
            if not bool((g == -1).all()):
                raise ConversionError(
                    layer, "weight_g_idx", g, f"activation ordering needs the group strategy, not {strategy}"
                )
        elif not bool((g == -1).any()):  # compressed-tensors: any -1 means column order
            perm = sort_groups(g, K, group_size, cols, layer, "weight_g_idx")
            if perm is not None:
                perm = perm.to(torch.int64)
                codes = codes.index_select(1, perm.to(codes.device))
    fmt = f"u{bits}{gran}-s{st}" + ("" if zeros is None else "-zi")
    q = QuantizedWeight(fmt, codes.contiguous(), scales.contiguous(), zeros)
    return ConvertedWeight(q, perm, f"compressed_tensors_{cfmt}")


def convert_layer(
    tensors: Mapping[str, torch.Tensor],
    prefix: str,
    scheme: Mapping[str, Any] | Any,
    *,
    compression_format: str | None = None,
    layer: str | None = None,
) -> ConvertedWeight:
    """Convert the layer ``prefix`` of a compressed-tensors state dict.

    ``scheme``: the config group of the layer (a dict with ``weights`` and maybe ``format``, from
    ``quantization_config.config_groups``) or its ``weights`` arguments alone.
    ``compression_format``: the group's or the config's ``format``; default ``pack-quantized``.
    Matching layers to config groups (``targets``, ``ignore``) is the caller's job.
    """
    layer = prefix if layer is None else layer
    args = config_value(scheme, "weights", scheme)
    if compression_format is None:
        compression_format = config_value(scheme, "format", "pack-quantized")
    if str(compression_format).strip().lower() in compressed_tensors_fp.SUPPORTED_FORMATS:
        return compressed_tensors_fp.convert_layer(
            tensors, prefix, scheme, compression_format=compression_format, layer=layer
        )
    get = lambda name, required=False: get_tensor(tensors, prefix, name, layer, required)  # noqa: E731
    return convert(
        get("weight_packed", True),
        get("weight_scale", True),
        args=args,
        weight_shape=get("weight_shape", True),
        weight_zero_point=get("weight_zero_point"),
        weight_g_idx=get("weight_g_idx"),
        compression_format=compression_format,
        layer=layer,
    )
