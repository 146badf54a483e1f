"""Reference quantization and GEMM in plain torch: the oracle of every test.

Everything here favours being obviously right over being fast. Kernels, packers and converters are
checked against these functions, so each rule is spelled out once, below, and nowhere else.

Logical weight form (``QuantizedWeight``)
-----------------------------------------
A quantized weight of N output channels and K inputs is held unpacked:

* ``codes``  uint8 [N, K]: the raw bit pattern of each code (``bits`` low bits used; signed integers in
  two's complement masked to ``bits`` bits; eXmY codes as their bit pattern).
* ``scales`` [ceil(N / group_n), ceil(K / group_k)] (``[N, 1]`` per channel) in the scale's storage
  dtype (see ``torch_dtype``; e8m0 is a uint8 holding the biased exponent byte, value 2**(byte - 127)).
* ``zeros``  same shape as ``scales``: uint8 integer codes (``-zi``) or the scale dtype (``-zf``).
* ``global_scale`` a float32 scalar (shape ``[]``) for ``-gs`` formats.

The weight value is defined as::

    w[n, k] = (decode(code[n, k]) - zero[g]) * scale_value[g] * global_scale
    g = (n // group_n, k // group_k)   (the K group is the whole row for per-channel scales)

without ``-zi``/``-zf`` the zero is implied: 2**(bits-1) for unsigned integer codes (GPTQ symmetric
"uint4b8": ``u4`` codes 0..15 stand for -8..7) and 0 for every other code type; global_scale = 1
without ``-gs``. Groups at the end of N or K may be partial when N or K is not a multiple of the
group size.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

from . import formats as F

__all__ = [
    "QuantizedWeight",
    "torch_dtype",
    "decode",
    "encode",
    "scale_value",
    "implied_zero",
    "quantize_weight",
    "dequantize_weight",
    "quantize_activation",
    "dequantize_activation",
    "gemm",
]

# Storage dtypes of the types that are held in torch tensors of their own (scales, activations,
# outputs). Weight codes are always uint8 bit patterns and are deliberately absent here.
_TORCH_DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
    "i8": torch.int8,
    "e8m0": torch.uint8,  # raw biased exponent byte, so every build of torch can hold it
}


def torch_dtype(dt: F.DType | str) -> torch.dtype:
    """Storage torch dtype of a scale, activation or output type (e8m0 -> uint8 exponent bytes)."""
    dt = F.dtype(dt)
    try:
        return _TORCH_DTYPES[str(dt)]
    except KeyError:
        raise F.FormatError(
            f"{dt} has no torch storage dtype of its own; accepted: {', '.join(_TORCH_DTYPES)} "
            "(weight codes are stored as uint8 bit patterns)"
        ) from None


def _code_type(dt: F.DType | str) -> F.DType:
    """A type that ``decode``/``encode`` can handle: at most 8 bits."""
    dt = F.dtype(dt)
    if dt.bits > 8:
        raise F.FormatError(
            f"{dt} is not a code type; decode/encode take types of at most 8 bits (i1..i8, u1..u8, eXmY, e8m0)"
        )
    return dt


def _check_codes(codes: torch.Tensor, dt: F.DType) -> None:
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"codes must be a torch.Tensor of dtype uint8, got {type(codes).__name__}")
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must have dtype torch.uint8 (raw bit patterns), got {codes.dtype}")
    if codes.numel() and int(codes.max()) >= (1 << dt.bits):
        raise ValueError(
            f"code {int(codes.max())} does not fit in the {dt.bits} bits of {dt}; codes are 0..{(1 << dt.bits) - 1}"
        )


def decode(codes: torch.Tensor, dt: F.DType | str) -> torch.Tensor:
    """Values (float32) of uint8 bit patterns of the type ``dt`` (at most 8 bits), by table lookup."""
    dt = _code_type(dt)
    _check_codes(codes, dt)
    table = torch.tensor(dt.values(), dtype=torch.float32, device=codes.device)
    return table[codes.long()]


def _round_half_even(x: torch.Tensor) -> torch.Tensor:
    # torch.round rounds halves to the even integer; spelled out because the rule matters here.
    return torch.round(x)


def encode(x: torch.Tensor, dt: F.DType | str) -> torch.Tensor:
    """uint8 codes of the representable values of ``dt`` nearest to ``x``.

    Ties go to the even code (for eXmY the even mantissa; for integers the even value). Values out of
    range saturate to the largest finite magnitude (integers clamp). The sign of a float that rounds to
    zero is kept (negative -> the -0 code), as torch's float8 casts do. NaN inputs are not supported.
    """
    dt = _code_type(dt)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"encode takes a floating point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    # float64 holds every float32/f16/bf16 input and every value of an 8-bit type exactly, so the
    # midpoint comparisons below are exact.
    x = x.double()
    mask = (1 << dt.bits) - 1
    if dt.is_int:
        v = _round_half_even(x).clamp(dt.min_int, dt.max_int).long()
        return (v & mask).to(torch.uint8)
    if dt.kind == F.KIND_E8M0:
        # Unsigned: every byte but 0xFF (NaN) is a value, increasing with the byte.
        mag_codes = torch.arange(0, 255, dtype=torch.long)
        a, sign = x, None
    else:
        # Sign-magnitude: round |x| over the non-negative half, whose values increase with the code.
        half = 1 << (dt.bits - 1)
        mag_codes = torch.tensor([c for c in range(half) if math.isfinite(dt.decode(c))], dtype=torch.long)
        a, sign = x.abs(), torch.signbit(x)
    vals = torch.tensor([dt.decode(int(c)) for c in mag_codes], dtype=torch.float64)
    # The finite non-negative codes are contiguous from 0 (only the top patterns are inf/NaN), so
    # neighbours in `vals` are neighbouring codes and exactly one of each pair is even.
    assert bool((mag_codes == torch.arange(len(mag_codes))).all())
    hi = torch.searchsorted(vals, a.contiguous()).clamp(max=len(vals) - 1)  # first value >= a
    lo = (hi - 1).clamp(min=0)
    mid = (vals[lo] + vals[hi]) / 2  # exact: both are short-mantissa values
    pick_hi = (a > mid) | ((a == mid) & (hi % 2 == 0))
    idx = torch.where(pick_hi, hi, lo)
    # Below the smallest value (only e8m0 has no zero) the nearest is the smallest.
    idx = torch.where(a <= vals[0], torch.zeros_like(idx), idx)
    code = mag_codes[idx]
    if sign is not None:
        code = code | (sign.long() << (dt.bits - 1))
    return code.to(torch.uint8)


# ---- weights ------------------------------------------------------------------------------------


@dataclasses.dataclass
class QuantizedWeight:
    """Unpacked quantized weight; see the module doc for the value definition.

    ``w[n,k] = (decode(code[n,k]) - zero[g]) * scale_value[g] * global_scale``,
    ``g = (n // group_n, k // group_k)``; without stored zeros, zero = ``implied_zero(fmt)``.
    """

    fmt: F.WeightFormat
    codes: torch.Tensor
    scales: torch.Tensor | None = None
    zeros: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.fmt = F.parse_weight_format(self.fmt)
        self.validate()

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def group_shape(self) -> tuple[int, int]:
        """(group_n, group_k) with the per-channel K group resolved to K."""
        return _group_shape(self.fmt, self.codes.shape[1])

    def scales_shape(self) -> tuple[int, int]:
        N, K = self.codes.shape
        gn, gk = self.group_shape()
        return (-(-N // gn), -(-K // gk))

    def validate(self) -> None:
        """Raise if tensors do not match the format (dtype, shape, presence)."""
        fmt = self.fmt
        if not isinstance(self.codes, torch.Tensor) or self.codes.dim() != 2:
            raise ValueError(
                f"codes must be a 2-D [N, K] uint8 tensor, got {getattr(self.codes, 'shape', type(self.codes).__name__)}"
            )
        _check_codes(self.codes, fmt.code)
        N, K = self.codes.shape
        if N == 0 or K == 0:
            raise ValueError(f"codes shape {tuple(self.codes.shape)} is empty; N and K must be at least 1")
        if fmt.scale is None:
            for name in ("scales", "zeros", "global_scale"):
                if getattr(self, name) is not None:
                    raise ValueError(f"format {fmt} has no scales, but {name} was given; pass None")
            return
        want = self.scales_shape()
        sdt = torch_dtype(fmt.scale)
        if not isinstance(self.scales, torch.Tensor):
            raise ValueError(f"format {fmt} needs scales: a tensor of shape {list(want)} and dtype {sdt}")
        if tuple(self.scales.shape) != want or self.scales.dtype != sdt:
            raise ValueError(
                f"scales of format {fmt} for codes {N}x{K} must have shape {list(want)} and dtype {sdt}, "
                f"got shape {list(self.scales.shape)} and dtype {self.scales.dtype}"
            )
        if fmt.zero == "none":
            if self.zeros is not None:
                raise ValueError(f"format {fmt} has no zero point, but zeros were given; pass None")
        else:
            zdt = torch.uint8 if fmt.zero == "int" else sdt
            if not isinstance(self.zeros, torch.Tensor):
                raise ValueError(f"format {fmt} needs zeros of shape {list(want)} and dtype {zdt}")
            if tuple(self.zeros.shape) != want or self.zeros.dtype != zdt:
                raise ValueError(
                    f"zeros of format {fmt} must have shape {list(want)} and dtype {zdt}, got shape "
                    f"{list(self.zeros.shape)} and dtype {self.zeros.dtype}"
                )
            if fmt.zero == "int" and self.zeros.numel() and int(self.zeros.max()) > fmt.code.max_int:
                raise ValueError(
                    f"integer zero point {int(self.zeros.max())} is outside the code range 0..{fmt.code.max_int}"
                )
        if fmt.global_scale:
            g = self.global_scale
            if not isinstance(g, torch.Tensor) or g.dtype != torch.float32 or g.dim() != 0:
                raise ValueError(
                    f"format {fmt} needs global_scale as a float32 scalar tensor (shape []), got "
                    f"{getattr(g, 'dtype', None)} {list(getattr(g, 'shape', [])) if g is not None else None}"
                )
        elif self.global_scale is not None:
            raise ValueError(f"format {fmt} has no global scale (-gs), but global_scale was given; pass None")


def implied_zero(fmt: F.WeightFormat | str) -> int:
    """Zero point of a format without stored zeros: 2**(bits-1) for unsigned integer codes, else 0.

    Unsigned codes without -zi/-zf are symmetric around the middle of their range (GPTQ symmetric,
    "uint4b8"), matching include/humming/numeric/dequant.h; formats with stored zeros return 0 here.
    """
    fmt = F.parse_weight_format(fmt)
    if fmt.code.kind == F.KIND_UINT and fmt.zero == "none":
        return 1 << (fmt.code.bits - 1)
    return 0


def _group_shape(fmt: F.WeightFormat, K: int) -> tuple[int, int]:
    return fmt.group_n, (fmt.group_k if fmt.group_k else K)


def _expand(g: torch.Tensor, gn: int, gk: int, N: int, K: int) -> torch.Tensor:
    """Broadcast a per-group [ceil(N/gn), ceil(K/gk)] tensor to [N, K] (partial last groups cut)."""
    return g.repeat_interleave(gn, dim=0)[:N].repeat_interleave(gk, dim=1)[:, :K]


def _grouped(w: torch.Tensor, gn: int, gk: int) -> torch.Tensor:
    """[N, K] -> [Ng, gn, Kg, gk], padding partial groups with zeros.

    Zero padding is harmless for every statistic taken here: amax, max(w, 0), and min/max ranges
    that include 0 by construction.
    """
    N, K = w.shape
    Ng, Kg = -(-N // gn), -(-K // gk)
    padded = torch.zeros(Ng * gn, Kg * gk, dtype=w.dtype)
    padded[:N, :K] = w
    return padded.view(Ng, gn, Kg, gk)


def scale_value(scales: torch.Tensor, fmt: F.WeightFormat | str | F.DType) -> torch.Tensor:
    """float32 values of stored scales (or float zero points): e8m0 bytes -> 2**(byte - 127).

    ``fmt`` is the weight format (its scale type is used) or the scale type itself.
    """
    if not isinstance(scales, torch.Tensor):
        raise TypeError(f"scales must be a torch.Tensor, got {type(scales).__name__}")
    if isinstance(fmt, F.DType):
        st = fmt
    else:
        wf = F.parse_weight_format(fmt) if not _is_dtype_name(fmt) else None
        st = wf.scale if wf is not None else F.dtype(fmt)
        if st is None:
            raise F.FormatError(f"weight format {wf} has no scales; scale_value needs a format with -s{{type}}")
    if st.kind == F.KIND_E8M0:
        if scales.dtype != torch.uint8:
            raise TypeError(f"e8m0 scales are stored as uint8 exponent bytes, got {scales.dtype}")
        # 2**(byte - 127) is exact in float64 and then in float32 (byte 0 is a float32 subnormal).
        v = torch.exp2(scales.double() - 127).float()
        return torch.where(scales == 0xFF, torch.full_like(v, math.nan), v)
    want = torch_dtype(st)
    if scales.dtype != want:
        raise TypeError(f"{st} scales are stored as {want}, got {scales.dtype}")
    return scales.float()


def _is_dtype_name(x) -> bool:
    return isinstance(x, str) and x.strip().lower() in F.SCALE_TYPES


@functools.lru_cache(maxsize=None)
def _max_value(st: F.DType) -> float:
    # DType.max_value scans every code; 16-bit types have 32768 of them, so remember the answer.
    return st.max_value


def _min_positive(st: F.DType) -> float:
    """Smallest positive value of a scale type (its smallest subnormal)."""
    return math.ldexp(1.0, 1 - st.bias - st.man)


def _round_scale(target: torch.Tensor, st: F.DType, empty: torch.Tensor) -> torch.Tensor:
    """Store float32 scale targets in the scale type ``st`` (not e8m0), rounding to nearest even.

    Targets above the type's range saturate to its largest finite value; a nonzero target that
    underflows becomes the smallest positive value, so no scale is 0; ``empty`` groups (all zero
    weights) get scale 1.
    """
    sdt = torch_dtype(st)
    stored = target.clamp(0.0, _max_value(st)).to(sdt)
    tiny = torch.tensor(_min_positive(st), dtype=torch.float32).to(sdt)
    stored = torch.where(stored.float() == 0, tiny.expand_as(stored), stored)
    return torch.where(empty, torch.ones_like(stored), stored)


def _floor_log2(x: torch.Tensor) -> torch.Tensor:
    # frexp gives x = m * 2**e with m in [0.5, 1), exactly, so floor(log2 x) = e - 1 for x > 0.
    _, e = torch.frexp(x)
    return e.long() - 1


def _e8m0_bytes(r: torch.Tensor, c: float, zero_point: bool, empty: torch.Tensor) -> torch.Tensor:
    """e8m0 scale bytes for group ranges ``r`` (float64) and code span ``c``.

    Symmetric formats follow the OCP MX rule 2**(floor(log2 amax) - floor(log2 code_max)), which may
    saturate the largest codes a little. Zero-point formats use the smallest power of two >= r / c,
    so the asymmetric range always fits (there is no MX convention to follow for them).
    """
    if zero_point:
        s = r / c
        e = _floor_log2(s)
        e = torch.where(torch.exp2(e.double()) < s, e + 1, e)  # ceil for non powers of two
    else:
        e = _floor_log2(r) - (math.frexp(c)[1] - 1)
    byte = (e + 127).clamp(0, 254)
    byte = torch.where(empty, torch.full_like(byte, 127), byte)  # all-zero group: scale 1
    return byte.to(torch.uint8)


def _check_float_matrix(t, subject: str, dims: str) -> None:
    """Raise TypeError / ValueError unless ``t`` is a 2-D floating point tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{subject} must be a torch.Tensor {dims} of floats, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{subject} must be 2-D {dims}, got shape {list(t.shape)}")
    if not t.is_floating_point():
        raise TypeError(f"{subject} must have a floating point dtype, got {t.dtype}")


def quantize_weight(w: torch.Tensor, fmt: F.WeightFormat | str) -> QuantizedWeight:
    """Quantize a float weight [N, K] to ``fmt`` with the reference rules.

    Per group (``group_n`` x ``group_k`` tile; the whole row for per-channel; partial last groups) a
    range ``r`` and a code span ``c`` define the ideal scale ``r / c``:

    * FP codes (eXmY): r = max|w|, c = code max value (e.g. 6 for e2m1, 448 for e4m3).
    * signed iB, and unsigned uB without zero point (implied zero 2**(B-1), so the same values as
      iB): r = max|w|, c = 2**(B-1) - 1 (symmetric; the value -2**(B-1) is only reached by
      rounding). B = 1, whose values are 0 and -1, uses c = 1 (positive weights clip to 0).
    * unsigned uB with zero point: r = max(w, 0) - min(w, 0) (the range always includes 0, so 0 is
      exactly representable), c = 2**B - 1.

    Scale storage:

    * f16 / bf16 / f32 / e4m3: round r / c to the type (nearest even), saturating at the type's
      maximum (an e4m3 scale above 448 saturates and the codes saturate with it).
    * e8m0 (MX): 2**(floor(log2 r) - floor(log2 c)) (OCP MX rule; the largest codes may saturate), or
      for zero-point formats the smallest power of two >= r / c.
    * global scale (-gs, NVFP4 style): G = max(r) / (scale_max * c) where scale_max is 448 for e4m3
      scales and 1 for f16/bf16/f32/e8m0 scales; the group scale is the rounding of (r / c) / G
      (e8m0: the rules above applied to r / G). G is stored as float32.

    The scale is rounded to its storage type first; codes are computed with the rounded (decoded)
    effective scale ``s = scale_value * G``:

    * FP codes and signed integer codes: code = encode(w / s) (nearest, ties to even, saturating).
    * unsigned codes without zero point: code = clamp(round(w / s) + 2**(B-1), 0, 2**B - 1).
    * int zero point: zero = clamp(round(-min / s), 0, 2**B - 1); code = clamp(round(w / s) + zero).
    * float zero point: zero = -min / s rounded to the scale type; code = clamp(round(w / s + zero)).

    Groups whose weights are all zero get scale 1 (and zero point 0), never 0 or NaN. A nonzero scale
    that underflows its type becomes the type's smallest positive value.
    """
    fmt = F.parse_weight_format(fmt)
    _check_float_matrix(w, "the weight", "[N, K]")
    if w.shape[0] == 0 or w.shape[1] == 0:
        raise ValueError(f"the weight shape {list(w.shape)} is empty; N and K must be at least 1")
    w = w.detach().to("cpu", torch.float32)
    if not bool(torch.isfinite(w).all()):
        raise ValueError("the weight has NaN or infinite entries; only finite weights can be quantized")
    N, K = w.shape
    code = fmt.code

    if fmt.scale is None:  # bare FP codes (e.g. e4m3): the weight is the code value
        return QuantizedWeight(fmt, encode(w, code))

    gn, gk = _group_shape(fmt, K)
    tiles = _grouped(w, gn, gk)
    has_zero = fmt.zero != "none"
    if code.is_int:
        # Symmetric codes (iB, uB with the implied zero) span 2**(B-1) - 1 either side of 0; B = 1
        # has no positive value (0 and -1), so its span is the magnitude 1 of -1.
        c = float((1 << code.bits) - 1) if has_zero else float(max((1 << (code.bits - 1)) - 1, 1))
    else:
        c = code.max_value
    if has_zero:
        hi = tiles.amax(dim=(1, 3)).clamp(min=0)
        lo = tiles.amin(dim=(1, 3)).clamp(max=0)
        r = hi.double() - lo.double()  # exact in float64, unlike in float32
    else:
        r = tiles.abs().amax(dim=(1, 3)).double()
        lo = None
    empty = r == 0

    st = fmt.scale
    if fmt.global_scale:
        scale_max = 448.0 if str(st) == "e4m3" else 1.0
        rmax = float(r.max())
        G = rmax / (scale_max * c) if rmax > 0 else 1.0
        gscale = torch.tensor(G, dtype=torch.float32)
        if float(gscale) == 0:  # a tensor so tiny that G underflows float32: keep it positive
            gscale = torch.tensor(math.ldexp(1.0, -149), dtype=torch.float32)
        G = float(gscale)  # use the stored float32 value from here on
    else:
        gscale = None
        G = 1.0

    if st.kind == F.KIND_E8M0:
        stored = _e8m0_bytes(r / G, c, has_zero, empty)
    else:
        stored = _round_scale((r / c / G).float(), st, empty)
    s_groups = scale_value(stored, st)
    if gscale is not None:
        s_groups = s_groups * gscale
    s = _expand(s_groups, gn, gk, N, K)
    x = w / s

    zeros = None
    if fmt.zero == "int":
        z_groups = _round_half_even(-lo / s_groups).clamp(0, code.max_int)
        z_groups = torch.where(empty, torch.zeros_like(z_groups), z_groups)
        zeros = z_groups.to(torch.uint8)
        z = _expand(z_groups, gn, gk, N, K)
        codes = (_round_half_even(x) + z).clamp(0, code.max_int).to(torch.uint8)
    elif fmt.zero == "float":
        # Clamped so a saturated or underflowed scale cannot push the zero out of its type's range.
        z_groups = torch.where(empty, torch.zeros_like(lo), -lo / s_groups).clamp(max=_max_value(st))
        zeros = z_groups.to(torch_dtype(st))
        z = _expand(scale_value(zeros, st), gn, gk, N, K)
        codes = _round_half_even(x + z).clamp(0, code.max_int).to(torch.uint8)
    elif code.kind == F.KIND_UINT:  # implied zero point 2**(B-1)
        codes = (_round_half_even(x) + implied_zero(fmt)).clamp(0, code.max_int).to(torch.uint8)
    else:
        codes = encode(x, code)
    return QuantizedWeight(fmt, codes, stored, zeros, gscale)


def dequantize_weight(q: QuantizedWeight) -> torch.Tensor:
    """float32 [N, K] weight values, per the definition in the module doc."""
    if not isinstance(q, QuantizedWeight):
        raise TypeError(f"dequantize_weight takes a QuantizedWeight, got {type(q).__name__}")
    q.validate()
    fmt = q.fmt
    v = decode(q.codes, fmt.code)
    if fmt.scale is None:
        return v
    N, K = q.codes.shape
    gn, gk = q.group_shape()
    if fmt.zero == "int":
        v = v - _expand(q.zeros.float(), gn, gk, N, K)
    elif fmt.zero == "float":
        v = v - _expand(scale_value(q.zeros, fmt.scale), gn, gk, N, K)
    else:
        v = v - implied_zero(fmt)
    v = v * _expand(scale_value(q.scales, fmt.scale), gn, gk, N, K)
    if fmt.global_scale:
        v = v * q.global_scale
    return v


# ---- activations --------------------------------------------------------------------------------

# Largest magnitude each quantized activation type takes; the per-token / per-group scale maps the
# row's (or group's) amax onto it.
_ACT_MAX = {"e4m3": 448.0, "e5m2": 57344.0, "i8": 127.0}


def _act_groups(afmt: F.ActivationFormat, K: int) -> int:
    return K if afmt.granularity == "token" else afmt.group_k


def quantize_activation(x: torch.Tensor, afmt: F.ActivationFormat | str):
    """Quantize activations [M, K]; returns (codes, scales).

    Unquantized formats (bf16, f16): (x in that dtype, None). Quantized: float32 scales [M, 1] per
    token or [M, ceil(K / group_k)] per group (last group partial), scale = amax / type_max (448 e4m3,
    57344 e5m2, 127 i8; an all-zero row or group gets scale 1); codes = x / scale, clamped to
    +-type_max and cast to e4m3/e5m2 (nearest even), or for i8 rounded half to even and clamped to
    [-128, 127].
    """
    afmt = F.parse_activation_format(afmt)
    _check_float_matrix(x, "activations", "[M, K]")
    t = str(afmt.type)
    if not afmt.quantized:
        return x.to(torch_dtype(afmt.type)), None
    x = x.detach().float()
    M, K = x.shape
    g = _act_groups(afmt, K)
    tmax = _ACT_MAX[t]
    amax = _grouped(x, 1, g).abs().amax(dim=(1, 3))  # [M, ceil(K/g)]
    scales = torch.where(amax == 0, torch.ones_like(amax), amax / tmax)
    y = x / _expand(scales, 1, g, M, K)
    if t == "i8":
        codes = _round_half_even(y).clamp(-128, 127).to(torch.int8)
    else:
        codes = y.clamp(-tmax, tmax).to(torch_dtype(afmt.type))
    return codes, scales


def dequantize_activation(codes: torch.Tensor, scales: torch.Tensor | None, afmt) -> torch.Tensor:
    """float32 activation values: codes * scale (per token or per group), or codes for bf16/f16."""
    afmt = F.parse_activation_format(afmt)
    want = torch_dtype(afmt.type)
    if not isinstance(codes, torch.Tensor) or codes.dim() != 2:
        raise ValueError(
            f"activations must be a 2-D [M, K] tensor, got {getattr(codes, 'shape', type(codes).__name__)}"
        )
    if codes.dtype != want:
        raise TypeError(f"activations of format {afmt} must be stored as {want}, got {codes.dtype}")
    if not afmt.quantized:
        if scales is not None:
            raise ValueError(f"activation format {afmt} is not quantized and takes no scales; pass None")
        return codes.float()
    M, K = codes.shape
    g = _act_groups(afmt, K)
    shape = [M, -(-K // g)]
    if scales is None or not isinstance(scales, torch.Tensor):
        raise ValueError(f"activation format {afmt} needs float32 scales of shape {shape}")
    if list(scales.shape) != shape or scales.dtype != torch.float32:
        raise ValueError(
            f"activation scales of format {afmt} for [{M}, {K}] must be float32 of shape {shape}, got "
            f"{scales.dtype} of shape {list(scales.shape)}"
        )
    return codes.float() * _expand(scales, 1, g, M, K)


# ---- GEMM ---------------------------------------------------------------------------------------

_OUT_TORCH = {torch.float16, torch.bfloat16, torch.float32}


def gemm(
    a: torch.Tensor, q: QuantizedWeight, act_fmt="bf16", a_scales=None, out_dtype=torch.bfloat16, bias=None
) -> torch.Tensor:
    """out[M, N] = dequantize_activation(a) @ dequantize_weight(q).T (+ bias), in float32, then cast.

    ``a`` is already in the activation format's storage dtype (use ``quantize_activation`` first for
    quantized formats); ``out_dtype`` is a torch dtype or an output type name (f16, bf16, f32).
    """
    act_fmt = F.parse_activation_format(act_fmt)
    if not isinstance(out_dtype, torch.dtype):
        out_t = F.dtype(out_dtype)
        if str(out_t) not in F.OUT_TYPES:
            raise F.FormatError(f"output type {out_t} is not accepted; output types: {', '.join(F.OUT_TYPES)}")
        out_dtype = torch_dtype(out_t)
    if out_dtype not in _OUT_TORCH:
        raise TypeError(f"out_dtype {out_dtype} is not accepted; output dtypes: float16, bfloat16, float32")
    if not isinstance(q, QuantizedWeight):
        raise TypeError(f"the weight must be a QuantizedWeight, got {type(q).__name__}")
    A = dequantize_activation(a, a_scales, act_fmt)
    W = dequantize_weight(q)
    if A.shape[1] != W.shape[1]:
        raise ValueError(f"activations have K = {A.shape[1]} but the weight has K = {W.shape[1]}; they must match")
    out = A @ W.T
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (W.shape[0],) or not bias.is_floating_point():
            raise ValueError(
                f"bias must be a floating point tensor of shape [{W.shape[0]}] (N), got "
                f"{getattr(bias, 'dtype', type(bias).__name__)} {list(getattr(bias, 'shape', []))}"
            )
        out = out + bias.float()
    return out.to(out_dtype)
