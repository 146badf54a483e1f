"""GPTQ checkpoints (AutoGPTQ, GPTQModel, optimum / transformers) into the unified format.

Tensors of one linear layer with K inputs and N outputs, ``G = ceil(K / group_size)`` groups
(``group_size = -1``: one group, per channel), ``b`` bits:

* ``qweight`` int32 [ceil(K*b/32), N]: the codes packed along K, one LSB-first bit stream per output
  column: code ``k`` is stream bits ``b*k .. b*k + b - 1``, stream bit ``i`` being bit ``i % 32`` of
  row ``i // 32``. For 2, 4 and 8 bits that is ``32 / b`` codes per int32, code ``k`` at bits
  ``b * (k % (32/b))``; 3-bit codes straddle words (32 codes in 3 int32).
* ``qzeros`` int32 [G, ceil(N*b/32)]: the zero points, packed the same way along N.
* ``scales`` [G, N] (float16 in practice; bfloat16 / float32 are kept as they are).
* ``g_idx`` int32 [K], optional: the group of each input; ``k // group_size`` unless the checkpoint
  was made with ``desc_act`` (act-order) and without static groups.

The weight is ``w[n, k] = scales[g, n] * (code[k, n] - zero[g, n])`` with ``g = g_idx[k]``, where

* checkpoint format ``gptq`` (v1, the default, and what AutoGPTQ writes): the stored zero point is
  the real one minus one, ``zero = stored + 1``; a stored all-ones value would mean a zero point of
  ``2**b``, which no ``b``-bit code can be, so it is refused (v1 cannot store a zero point of 0:
  AutoGPTQ's packer then writes -1, which also spoils the neighbouring zero points);
* ``gptq_v2`` (GPTQModel's ``format`` / ``checkpoint_format``): ``zero = stored``.

Symmetric GPTQ (``sym``) has ``zero = 2**(b-1)`` everywhere (stored ``2**(b-1) - 1`` in v1), which is
the unified format's implied zero of unsigned codes: such a layer becomes ``u{b}g{size}-s{type}``
(``uint4b8`` for 4 bits); otherwise the zero points are kept as integer codes,
``u{b}g{size}-s{type}-zi``. Codes, scales and zero points are copied bit for bit.

Act-order: when ``g_idx`` is not ``k // group_size``, the inputs are permuted so that each group is
contiguous (possible when every group has ``group_size`` inputs, the last one the remainder; other
groupings are refused) and the permutation is returned as ``ConvertedWeight.perm``: the caller must
feed ``x.index_select(-1, perm)`` to the converted weight.

Supported: 2, 3, 4 and 8 bits; ``gptq`` and ``gptq_v2`` layouts; int32 packing words. Not supported
(refused with an error naming the setting): other bit widths, GPTQModel's planar ``gptq_p``, the
Marlin / BitBLAS / QQQ repacked formats, other packing word types.
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
    sort_groups,
    unpack_stream,
)

__all__ = ["convert", "convert_layer", "BITS", "CHECKPOINT_FORMATS"]

BITS = (2, 3, 4, 8)
CHECKPOINT_FORMATS = {"gptq": 1, "gptq_v1": 1, "gptq_v2": 2}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def convert(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None = None,
    *,
    bits: int,
    group_size: int,
    sym: bool | None = None,
    checkpoint_format: str = "gptq",
    in_features: int | None = None,
    layer: str = "",
) -> ConvertedWeight:
    """Convert one GPTQ layer (see the module doc) to a ``ConvertedWeight``.

    ``sym``: True checks that every zero point is ``2**(bits-1)`` and gives the implied-zero format;
    False keeps the zero points (``-zi``); None (default) picks the implied-zero format exactly when
    every zero point is ``2**(bits-1)``. ``in_features``: K, when neither ``g_idx`` nor the shape of
    ``qweight`` tells it (``qweight`` rows * 32 / bits otherwise). ``layer`` names the layer in errors.
    """
    if bits not in BITS:
        raise ConversionError(layer, "bits", bits, f"GPTQ layers of {', '.join(map(str, BITS))} bits are supported")
    fmt_key = str(checkpoint_format).strip().lower()
    if fmt_key not in CHECKPOINT_FORMATS:
        raise ConversionError(
            layer,
            "checkpoint_format",
            checkpoint_format,
            "supported GPTQ checkpoint formats: gptq (v1, zero points stored minus "
            "one) and gptq_v2 (zero points as they are)",
        )
    version = CHECKPOINT_FORMATS[fmt_key]
    need_tensor(qweight, layer, "qweight", dtypes=(torch.int32,), ndim=2)
    need_tensor(qzeros, layer, "qzeros", dtypes=(torch.int32,), ndim=2)
    need_tensor(scales, layer, "scales", dtypes=_FLOATS, ndim=2)
    st = scale_type_name(scales, layer, "scales")

    G, N = scales.shape
    rows = qweight.shape[0]
    if g_idx is not None:
        need_tensor(g_idx, layer, "g_idx", ndim=1)
        K = g_idx.numel()
    elif in_features is not None:
        K = int(in_features)
    else:
        if rows * 32 % bits:
            raise ConversionError(
                layer,
                "qweight.shape",
                list(qweight.shape),
                f"{rows} rows of int32 do not hold a whole number of {bits}-bit codes; pass in_features",
            )
        K = rows * 32 // bits
    if K < 1 or N < 1:
        raise ConversionError(layer, "scales.shape", list(scales.shape), f"empty layer (K = {K}, N = {N})")
    need_shape(
        qweight,
        [-(-K * bits // 32), N],
        layer,
        "qweight",
        f"K = {K} inputs of {bits} bits packed along K, N = {N} outputs from scales",
    )
    if group_size is None:
        raise ConversionError(layer, "group_size", None, "GPTQ needs group_size (-1 for per channel)")
    group_size = int(group_size)
    want_g = n_groups(K, group_size)
    need_shape(scales, [want_g, N], layer, "scales", f"ceil(K / group_size) = {want_g} groups of N = {N}")
    need_shape(
        qzeros,
        [want_g, -(-N * bits // 32)],
        layer,
        "qzeros",
        f"{want_g} groups, N = {N} zero points of {bits} bits packed along N",
    )
    gran = granularity(group_size, K, want_g, layer, "group_size")

    codes = unpack_stream(qweight, bits, K, dim=0).t()  # [N, K]
    stored = unpack_stream(qzeros, bits, N, dim=1)  # [G, N]
    top = (1 << bits) - 1
    if version == 1:
        if bool((stored == top).any()):
            g, n = (int(i) for i in (stored == top).nonzero()[0])
            raise ConversionError(
                layer,
                "qzeros",
                qzeros,
                f"group {g}, output {n} stores {top}, i.e. a zero point of {top + 1} in the v1 "
                f"layout (stored + 1), outside the {bits}-bit code range 0..{top}; v1 checkpoints "
                "cannot hold a zero point of 0 (if this checkpoint stores zero points as they are, "
                "its checkpoint_format is gptq_v2)",
            )
        zeros = stored + 1
    else:
        zeros = stored
    mid = 1 << (bits - 1)
    all_mid = bool((zeros == mid).all())
    if sym and not all_mid:
        g, n = (int(i) for i in (zeros != mid).nonzero()[0])
        hint = " (a v2 checkpoint read as v1?)" if version == 1 and bool((zeros == mid + 1).all()) else ""
        raise ConversionError(
            layer,
            "qzeros",
            qzeros,
            f"sym is set but group {g}, output {n} has zero point {int(zeros[g, n])} (stored "
            f"{int(stored[g, n])}, checkpoint format {fmt_key}); symmetric GPTQ has {mid}{hint}",
        )
    implied = all_mid if sym is None else bool(sym)

    perm = None
    if g_idx is not None:
        perm = sort_groups(g_idx, K, group_size, want_g, layer, "g_idx")
        if perm is not None:
            perm = perm.to(torch.int64)
            codes = codes.index_select(1, perm.to(codes.device))
    fmt = f"u{bits}{gran}-s{st}" + ("" if implied else "-zi")
    q = QuantizedWeight(fmt, codes.contiguous(), scales.t().contiguous(), None if implied else zeros.t().contiguous())
    return ConvertedWeight(q, perm, f"gptq_v{version}")


def convert_layer(
    tensors: Mapping[str, torch.Tensor], prefix: str, config: Mapping[str, Any] | Any, *, layer: str | None = None
) -> ConvertedWeight:
    """Convert the layer ``prefix`` (e.g. ``model.layers.0.self_attn.q_proj``) of a GPTQ state dict.

    ``tensors`` maps names to tensors (``{prefix}.qweight``, ``.qzeros``, ``.scales``, optional
    ``.g_idx``); ``config`` is the ``quantization_config`` of ``config.json`` or
    ``quantize_config.json``: ``bits``, ``group_size``, ``sym``, ``desc_act`` and the checkpoint format
    under ``checkpoint_format`` (transformers, AutoGPTQ) or ``format`` (GPTQModel), default ``gptq``.
    Per-module overrides (GPTQModel ``dynamic``) are the caller's to apply to ``config`` first.
    """
    layer = prefix if layer is None else layer
    method = config_value(config, ("quant_method", "method"))
    if method is not None and str(method).lower() != "gptq":
        raise ConversionError(layer, "quant_method", method, "this is the GPTQ importer")
    bits = config_value(config, ("bits", "w_bit"))
    if bits is None:
        raise ConversionError(layer, "bits", None, "the quantization config has no bits")
    group_size = config_value(config, "group_size", -1)
    sym = config_value(config, "sym")
    f1 = config_value(config, "checkpoint_format")
    f2 = config_value(config, "format")
    if f1 is not None and f2 is not None and str(f1).lower() != str(f2).lower():
        raise ConversionError(layer, "checkpoint_format", f1, f"disagrees with format = {f2!r}")
    if config_value(config, "is_marlin_format", False):
        raise ConversionError(layer, "is_marlin_format", True, "Marlin-repacked GPTQ checkpoints are not supported")
    ckpt = f1 if f1 is not None else (f2 if f2 is not None else "gptq")
    g_idx = get_tensor(tensors, prefix, "g_idx", layer, required=False)
    if g_idx is None and config_value(config, "desc_act", False):
        static = config_value(config_value(config, "meta", {}), "static_groups", False) or config_value(
            config, "static_groups", False
        )
        if not static:
            raise ConversionError(
                layer,
                f"{prefix}.g_idx",
                None,
                "desc_act is set, so the input-to-group map g_idx is needed, and it is missing",
            )
    return convert(
        get_tensor(tensors, prefix, "qweight", layer),
        get_tensor(tensors, prefix, "qzeros", layer),
        get_tensor(tensors, prefix, "scales", layer),
        g_idx,
        bits=int(bits),
        group_size=int(group_size),
        sym=None if sym is None else bool(sym),
        checkpoint_format=ckpt,
        layer=layer,
    )
