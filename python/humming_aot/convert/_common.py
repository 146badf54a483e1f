"""Pieces shared by the checkpoint importers: the result type, the error type, bit unpacking,
scale types and the act-order (``g_idx``) analysis.

Nothing here re-quantizes: every function moves bits or checks them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .. import formats as F
from ..reference import QuantizedWeight

__all__ = ["ConversionError", "ConvertedWeight", "fuse"]


class ConversionError(ValueError):
    """A checkpoint tensor or setting that an importer cannot turn into the unified format exactly.

    The message names the layer, the offending field (a tensor name or a config key) and its value;
    the same three are kept as attributes ``layer``, ``field`` and ``value``.
    """

    def __init__(self, layer: str, field: str, value: Any, reason: str):
        self.layer, self.field, self.value = layer, field, value
        where = f"layer {layer!r}" if layer else "layer (unnamed)"
        super().__init__(f"{where}: {field} = {_show(value)}: {reason}")


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return f"{value.item()!r} ({value.dtype})"
        return f"tensor of shape {list(value.shape)} and dtype {value.dtype}"
    return repr(value)


@dataclasses.dataclass
class ConvertedWeight:
    """One imported layer weight.

    ``weight``: the unified ``QuantizedWeight`` [N, K] (N outputs, K inputs).

    ``perm``: ``None`` when the weight's inputs are in the checkpoint's order. Otherwise an int64
    tensor [K] (a permutation of 0..K-1): input ``j`` of ``weight`` is input ``perm[j]`` of the
    original layer, so the caller must permute the activations the same way before the GEMM::

        y = x @ W.T  ==  x.index_select(-1, perm) @ dequantize_weight(weight).T

    (act-order checkpoints, GPTQ ``desc_act`` / compressed-tensors ``actorder="group"``, need it so
    that each quantization group becomes K-contiguous). A model loader may instead fold ``perm``
    into the layer that produces ``x`` where that is exact (e.g. the rows of a preceding linear).

    ``source``: which importer made it, e.g. ``"gptq_v1"``, ``"awq_gemm"``.
    """

    weight: QuantizedWeight
    perm: torch.Tensor | None = None
    source: str = ""

    @property
    def fmt(self) -> F.WeightFormat:
        return self.weight.fmt


# ---- small checks ---------------------------------------------------------------------------------

_SCALE_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}


def scale_type_name(scales: torch.Tensor, layer: str, field: str) -> str:
    """Scale type name (f16 / bf16 / f32) of a checkpoint's scale tensor; scales are kept bit for bit."""
    try:
        return _SCALE_NAMES[scales.dtype]
    except KeyError:
        raise ConversionError(
            layer,
            f"{field}.dtype",
            scales.dtype,
            "scales must be float16, bfloat16 or float32 to be kept exactly "
            "(the unified format has scale types f16, bf16, f32)",
        ) from None


def need_tensor(t: Any, layer: str, field: str, *, dtypes=None, ndim=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ConversionError(layer, field, type(t).__name__, "a torch.Tensor is required")
    if dtypes is not None and t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise ConversionError(layer, f"{field}.dtype", t.dtype, f"expected {names}")
    if ndim is not None and t.dim() != ndim:
        raise ConversionError(layer, f"{field}.shape", list(t.shape), f"expected a {ndim}-D tensor")
    return t


def need_shape(t: torch.Tensor, shape, layer: str, field: str, why: str) -> None:
    if list(t.shape) != list(shape):
        raise ConversionError(layer, f"{field}.shape", list(t.shape), f"expected {list(shape)} ({why})")


def get_tensor(tensors: Mapping[str, torch.Tensor], prefix: str, name: str, layer: str, required: bool = True):
    key = f"{prefix}.{name}" if prefix else name
    if key in tensors:
        return tensors[key]
    if required:
        raise ConversionError(layer, key, None, "the tensor is missing from the checkpoint")
    return None


def config_value(config: Any, names, default=None):
    """First present key of ``names`` in a mapping (or attribute of an object); ``default`` if none."""
    if isinstance(names, str):
        names = (names,)
    for n in names:
        if isinstance(config, Mapping):
            if n in config and config[n] is not None:
                return config[n]
        elif config is not None and getattr(config, n, None) is not None:
            v = getattr(config, n)
            return getattr(v, "value", v)  # enums (e.g. pydantic use_enum_values=False)
    return default


# ---- granularity ----------------------------------------------------------------------------------


def granularity(group_size: int | None, K: int, num_groups: int, layer: str, field: str) -> str:
    """Weight format granularity for K groups of ``group_size`` inputs (None / -1 / 0: per channel).

    A power of two from 8 to 4096 is kept as ``g{size}`` (partial last group allowed); any group size
    that covers all of K in one group is the same thing as per channel (``gc``).
    """
    if group_size is None or group_size in (-1, 0):
        return "gc"
    if group_size < 0:
        raise ConversionError(layer, field, group_size, "group sizes are positive, or -1 for per channel")
    try:
        F._check_pow2_group(group_size, "the K group size")
    except F.FormatError as e:
        if num_groups == 1 and group_size >= K:
            return "gc"
        raise ConversionError(
            layer,
            field,
            group_size,
            f"the unified format cannot represent it: {e} (or one group covering all K = {K} inputs)",
        ) from None
    return f"g{group_size}"


def n_groups(K: int, group_size: int | None) -> int:
    if group_size is None or group_size <= 0:
        return 1
    return -(-K // group_size)


# ---- bit unpacking --------------------------------------------------------------------------------


def _along_last(words: torch.Tensor, dim: int) -> torch.Tensor:
    return words if dim in (1, -1) else words.t()


def unpack_stream(words: torch.Tensor, bits: int, count: int, dim: int) -> torch.Tensor:
    """Values of ``bits`` bits packed as one LSB-first bit stream along ``dim`` of an int32 tensor.

    Value ``i`` occupies stream bits ``bits*i .. bits*i + bits - 1``; stream bit ``b`` is bit
    ``b % 32`` of word ``b // 32``. So a value may straddle two words (3 bits: 32 values in 3 words,
    GPTQ's layout). Returns uint8 with ``count`` values along ``dim``. ``words`` along ``dim`` must
    be exactly ``ceil(count * bits / 32)`` long (checked by the caller).
    """
    w = _along_last(words, dim)  # [R, W]
    R, W = w.shape
    period = 32 // _gcd(bits, 32)  # values per whole number of words
    pwords = period * bits // 32
    blocks = -(-W // pwords)
    if blocks * pwords != W:  # pad to whole periods; the padding values are cut below
        w = torch.cat([w, w.new_zeros(R, blocks * pwords - W)], dim=1)
    w = w.reshape(R, blocks, pwords)
    out = torch.empty(R, blocks, period, dtype=torch.uint8, device=words.device)
    mask = (1 << bits) - 1
    for j in range(period):
        bit = bits * j
        word, shift = divmod(bit, 32)
        # int32 shifts are arithmetic, but masking to the bits below 32 - shift discards the sign fill.
        lo = (w[:, :, word] >> shift) & ((1 << min(bits, 32 - shift)) - 1)
        if shift + bits > 32:
            hi = w[:, :, word + 1] & ((1 << (shift + bits - 32)) - 1)
            lo = lo | (hi << (32 - shift))
        out[:, :, j] = (lo & mask).to(torch.uint8)
    out = out.reshape(R, blocks * period)[:, :count]
    return out if dim in (1, -1) else out.t()


def unpack_words(words: torch.Tensor, bits: int, count: int, dim: int) -> torch.Tensor:
    """Values of ``bits`` bits, ``32 // bits`` per int32 word, LSB first, never straddling words.

    Value ``i`` is bits ``bits*(i % p) ..`` of word ``i // p`` along ``dim`` with ``p = 32 // bits``
    (the top ``32 - p*bits`` bits of a word are unused: compressed-tensors' layout; for 2, 4 and 8
    bits it is the same as ``unpack_stream``). Returns uint8 with ``count`` values along ``dim``.
    """
    w = _along_last(words, dim)
    R, W = w.shape
    p = 32 // bits
    out = torch.empty(R, W, p, dtype=torch.uint8, device=words.device)
    mask = (1 << bits) - 1
    for j in range(p):
        out[:, :, j] = ((w >> (bits * j)) & mask).to(torch.uint8)
    out = out.reshape(R, W * p)[:, :count]
    return out if dim in (1, -1) else out.t()


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


# ---- act-order ------------------------------------------------------------------------------------


def sort_groups(
    g_idx: torch.Tensor, K: int, group_size: int | None, num_groups: int, layer: str, field: str
) -> torch.Tensor | None:
    """The input permutation that makes the groups of ``g_idx`` K-contiguous, or None if they are.

    ``g_idx[k]`` is the group (row of the scales) of input ``k``. The unified format needs group
    ``g`` to be inputs ``g*group_size .. (g+1)*group_size - 1``; that is reachable by permuting K
    exactly when every group but the last has ``group_size`` members and the last the rest. Then
    ``perm`` (a stable sort of ``g_idx``) lists the original inputs in the new order.
    """
    need_tensor(g_idx, layer, field, ndim=1)
    if g_idx.dtype.is_floating_point or g_idx.dtype == torch.bool or g_idx.is_complex():
        raise ConversionError(layer, f"{field}.dtype", g_idx.dtype, "group indices must be integers")
    if g_idx.numel() != K:
        raise ConversionError(layer, f"{field}.shape", list(g_idx.shape), f"expected [{K}] (one group per input)")
    g = g_idx.to(torch.int64)
    lo, hi = int(g.min()), int(g.max())
    if lo < 0 or hi >= num_groups:
        bad = lo if lo < 0 else hi
        raise ConversionError(
            layer, field, g_idx, f"holds group {bad}, outside 0..{num_groups - 1} (the scales have {num_groups} groups)"
        )
    gs = K if group_size is None or group_size <= 0 else group_size
    want = torch.arange(K, device=g.device) // gs
    if bool(torch.equal(g, want)):
        return None
    perm = torch.sort(g, stable=True).indices
    if not bool(torch.equal(g[perm], want)):
        counts = torch.bincount(g, minlength=num_groups).tolist()
        expect = [min(gs, K - i * gs) for i in range(num_groups)]
        first = next(i for i, (c, e) in enumerate(zip(counts, expect)) if c != e)
        raise ConversionError(
            layer,
            field,
            g_idx,
            f"group {first} has {counts[first]} inputs where {expect[first]} are needed; the "
            f"groups cannot be made K-contiguous groups of {gs} by permuting the inputs, so the "
            "unified format cannot hold this weight exactly",
        )
    return perm


# ---- floating point codes ---------------------------------------------------------------------------

# torch's float8 dtypes are exactly the unified code types of the same name (e4m3 follows the
# float8_e4m3fn rules, e5m2 the IEEE ones), so their bytes are the codes as they are.
FP8_CODE_NAMES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def fp8_codes(weight: Any, layer: str, field: str) -> tuple[torch.Tensor, str]:
    """(uint8 bit patterns, code type name) of a 2-D float8 weight; the bytes are not touched."""
    need_tensor(weight, layer, field, ndim=2)
    name = FP8_CODE_NAMES.get(weight.dtype)
    if name is None:
        raise ConversionError(
            layer, f"{field}.dtype", weight.dtype, "expected float8_e4m3fn or float8_e5m2 (FP8 weights)"
        )
    return weight.contiguous().view(torch.uint8), name


def unpack_fp4(packed: Any, layer: str, field: str, rows: int | None = None) -> torch.Tensor:
    """uint8 [..., 2 * C] e2m1 codes of a uint8 tensor [..., C] holding two codes per byte.

    Every FP4 checkpoint this package knows (compressed-tensors, ModelOpt, gpt-oss) stores element
    ``2j`` of a row in the low nibble of byte ``j`` and element ``2j + 1`` in the high nibble; the
    nibble is the e2m1 bit pattern (sign in bit 3), which is the unified code as it is.
    """
    need_tensor(packed, layer, field, dtypes=(torch.uint8,))
    if packed.dim() < 1 or packed.shape[-1] < 1:
        raise ConversionError(layer, f"{field}.shape", list(packed.shape), "expected bytes along the last dim")
    if rows is not None and (packed.dim() != 2 or packed.shape[0] != rows):
        raise ConversionError(layer, f"{field}.shape", list(packed.shape), f"expected [{rows}, K / 2]")
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2).contiguous()


def e4m3_scales(t: Any, layer: str, field: str) -> torch.Tensor:
    need_tensor(t, layer, field, dtypes=(torch.float8_e4m3fn,), ndim=2)
    return t.contiguous()


def e8m0_scales(t: Any, layer: str, field: str) -> torch.Tensor:
    """e8m0 exponent bytes (value 2**(byte - 127)), kept as they are."""
    need_tensor(t, layer, field, dtypes=(torch.uint8,))
    return t.contiguous()


def scalar_f32(t: Any, layer: str, field: str) -> torch.Tensor:
    """A one-element floating point tensor as a float32 scalar (shape []); the value must be finite
    and positive and survive the cast to float32 unchanged."""
    need_tensor(t, layer, field)
    if t.numel() != 1 or not t.dtype.is_floating_point:
        raise ConversionError(layer, field, t, "expected one floating point value (a per-tensor scale)")
    v = t.detach().reshape(()).cpu()
    f = v.to(torch.float32)
    if not (bool(torch.isfinite(f)) and float(f) > 0) or f.double() != v.double():
        raise ConversionError(layer, field, t, "a per-tensor scale must be a positive finite float32 value")
    return f


def reciprocal_f32(t: Any, layer: str, field: str) -> torch.Tensor:
    """float32 scalar nearest to ``1 / t`` (computed in float64, rounded once).

    For tools that store a divisor (compressed-tensors' NVFP4 ``weight_global_scale``, BitNet's
    ``weight_scale``): the unified format multiplies, so the divisor's reciprocal is stored. That is
    exact when ``t`` is a power of two and otherwise within half an ulp of float32 (relative error
    at most 2**-24); nothing else in the weight is touched.
    """
    v = scalar_f32(t, layer, field)
    r = (1.0 / v.double()).to(torch.float32)
    if not bool(torch.isfinite(r)) or float(r) == 0:
        raise ConversionError(layer, field, t, "its reciprocal is not a finite nonzero float32 value")
    return r


def block_structure(args: Any, layer: str) -> tuple[int, int]:
    """compressed-tensors' ``block_structure`` ([rows, cols] or "RxC") as (outputs, inputs) per
    block, each a power of two the unified format can hold."""
    block = config_value(args, "block_structure")
    if isinstance(block, str):
        block = [int(v) for v in block.lower().split("x")]
    return block_pair(block, layer, "weights.block_structure", "[rows, cols]")


def block_pair(block: Any, layer: str, field: str, spelled: str) -> tuple[int, int]:
    """A checkpoint's block shape ``[outputs, inputs]`` (``spelled`` as its tool names the two) as
    integers, each a power of two the unified format can hold; else a ConversionError on ``field``."""
    if not isinstance(block, Sequence) or isinstance(block, str) or len(block) != 2:
        raise ConversionError(layer, field, block, f"expected {spelled}")
    bn, bk = (int(v) for v in block)
    for what, v in (("outputs", bn), ("inputs", bk)):
        try:
            F._check_pow2_group(v, f"the block's {what}")
        except F.FormatError as e:
            raise ConversionError(layer, field, list(block), f"the unified format cannot represent it: {e}") from None
    return bn, bk


# ---- fused projections ----------------------------------------------------------------------------


def fuse(parts: Sequence[ConvertedWeight], layer: str = "") -> ConvertedWeight:
    """One weight from the weights of projections that share their input (q, k and v; gate and
    up), stacked along N in the given order, exactly: codes, scales and zero points are
    concatenated, and each part keeps its own scales (per channel or per group, its own values).

    The parts must have the same format and K, each N a multiple of the format's N group (so no
    scale group straddles two parts), the same input permutation (or none), and the same global
    scale where the format has one: a global scale is one number for the whole tensor, and folding
    two different ones into the group scales would change them (NVFP4's e4m3 group scales cannot
    absorb the ratio exactly), so that is a ``ConversionError`` naming both values.
    """
    parts = list(parts)
    if not parts or not all(isinstance(p, ConvertedWeight) for p in parts):
        raise TypeError("fuse takes a non-empty list of ConvertedWeight (one per projection)")
    first = parts[0].weight
    fmt, k = first.fmt, first.codes.shape[1]
    group_n = first.group_shape()[0]
    for i, p in enumerate(parts):
        w = p.weight
        if w.fmt != fmt:
            raise ConversionError(layer, f"part {i} format", str(w.fmt), f"every part must have format {fmt}")
        if w.codes.shape[1] != k:
            raise ConversionError(layer, f"part {i} inputs", w.codes.shape[1], f"every part must have K = {k}")
        if i < len(parts) - 1 and w.codes.shape[0] % group_n:
            raise ConversionError(
                layer,
                f"part {i} outputs",
                w.codes.shape[0],
                f"must be a multiple of the format's N group ({group_n}) so that no scale block spans two parts",
            )
        if (p.perm is None) != (parts[0].perm is None) or (
            p.perm is not None and not torch.equal(p.perm, parts[0].perm)
        ):
            raise ConversionError(layer, f"part {i} input permutation", p.perm, "every part must permute K alike")
        if fmt.global_scale and not torch.equal(w.global_scale.float(), first.global_scale.float()):
            raise ConversionError(
                layer,
                f"part {i} global scale",
                w.global_scale,
                f"differs from part 0's ({float(first.global_scale)}); a fused weight has one global scale, "
                "and folding the ratio into the group scales would re-quantize them",
            )
    cat = lambda ts: None if ts[0] is None else torch.cat(ts, 0)  # noqa: E731
    fused = QuantizedWeight(
        fmt,
        torch.cat([p.weight.codes for p in parts], 0),
        cat([p.weight.scales for p in parts]),
        cat([p.weight.zeros for p in parts]),
        first.global_scale,
    )
    return ConvertedWeight(fused, parts[0].perm, "+".join(p.source for p in parts if p.source) or "fused")
