"""Quantization formats: data types, weight formats, activation formats.

This module is pure Python (no torch import) because the instance generator, which runs at
configure time on machines that may not have torch, uses it to name instances.

String forms (each parses back to an equal object, ``parse(str(f)) == f``):

Data types (``DType``)
    ``i1`` .. ``i8``   signed two's complement integers
    ``u1`` .. ``u8``   unsigned integers
    ``eXmY``           signed floating point with X exponent bits and Y mantissa bits,
                       1 + X + Y <= 8, X >= 1; exponent bias 2**(X-1) - 1, subnormals when the
                       exponent field is 0. Special values:
                         ``e5m2``: IEEE rules (exponent all ones: infinity if mantissa is 0, else NaN),
                                   as torch.float8_e5m2;
                         ``e4m3``: only S.1111.111 is NaN, no infinity, max 448, as
                                   torch.float8_e4m3fn;
                         every other eXmY: all bit patterns are finite numbers (no infinity, no NaN),
                                   as the OCP MX FP6/FP4 types (e2m1, e3m2, e2m3).
    ``e8m0``           unsigned power of two 2**(bits - 127); 0xFF is NaN (OCP MX scale type)
    ``f16``, ``bf16``, ``f32``   IEEE half, bfloat16, single

Weight formats (``WeightFormat``): ``{code}[{granularity}-s{scale}][-z{i|f}][-gs]``
    granularity  ``g{K}``: one scale per K consecutive inputs of an output channel;
                 ``gc``: one scale per output channel (K group = whole row);
                 ``g{K}n{N}``: block scales, one per K x N block (e.g. FP8 ``g128n128``).
    ``-s{type}`` scale type: f16, bf16, f32, e8m0 or e4m3.
    ``-zi`` / ``-zf`` zero point stored as an integer code / as a float in the scale type;
                 the weight value is ``(code - zero) * scale``. Only for unsigned integer codes.
                 Unsigned codes without ``-zi``/``-zf`` are symmetric: their zero point is implied,
                 2**(bits-1) (GPTQ symmetric, "uint4b8"), so ``u4g128-sbf16`` holds -8..7 times the
                 scale, like ``i4g128-sbf16`` with another bit encoding.
    ``-gs``      one more fp32 scale for the whole tensor (NVFP4 two-level scales).
    Examples: ``u4g128-sbf16`` (uint4 symmetric, GPTQ symmetric), ``u4g128-sf16-zi`` (GPTQ/AWQ
    asymmetric), ``i4g128-sf16`` (int4 symmetric, two's complement), ``e2m1g32-se8m0`` (MXFP4), ``e2m1g16-se4m3-gs`` (NVFP4),
    ``e4m3g128n128-sf32`` (FP8 block 128x128), ``e4m3`` (FP8 without scales).

Activation formats (``ActivationFormat``): ``{type}[-pt|-g{K}]``
    ``bf16``, ``f16``: unquantized; ``e4m3``, ``e5m2``, ``i8``: quantized with fp32 scales per
    token (``-pt``) or per group of K inputs of a token (``-g{K}``), e.g. ``e4m3-pt``.

GEMM formats (``GemmFormat``): ``a-{act}_w-{weight}_c-{out}``, e.g. ``a-bf16_w-u4g128-sbf16_c-bf16``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

__all__ = [
    "DType",
    "WeightFormat",
    "ActivationFormat",
    "GemmFormat",
    "FormatError",
    "dtype",
    "parse_weight_format",
    "parse_activation_format",
    "parse_gemm_format",
    "ARCH_FAMILIES",
    "arch_family",
    "support",
    "SCALE_TYPES",
    "ACT_TYPES",
    "OUT_TYPES",
]


class FormatError(ValueError):
    """A format string or a format combination is not valid; the message says what is allowed."""


# Kinds of data type. The numeric values are shared with include/humming/format/dtype.h.
KIND_INT = 0
KIND_UINT = 1
KIND_FLOAT = 2
KIND_E8M0 = 3

_DTYPE_HELP = (
    "accepted data types: i1..i8, u1..u8, eXmY with 1+X+Y <= 8 and X >= 1 (e.g. e2m1, e4m3, e5m2), e8m0, f16, bf16, f32"
)


@dataclasses.dataclass(frozen=True)
class DType:
    """A numeric data type. ``exp``/``man`` are the field widths for floating point kinds."""

    kind: int
    bits: int
    exp: int = 0
    man: int = 0

    # ---- naming -------------------------------------------------------------------------------
    def __str__(self) -> str:
        if self.kind == KIND_INT:
            return f"i{self.bits}"
        if self.kind == KIND_UINT:
            return f"u{self.bits}"
        if self.kind == KIND_E8M0:
            return "e8m0"
        if (self.exp, self.man) == (5, 10):
            return "f16"
        if (self.exp, self.man) == (8, 7):
            return "bf16"
        if (self.exp, self.man) == (8, 23):
            return "f32"
        return f"e{self.exp}m{self.man}"

    def __repr__(self) -> str:
        return f"dtype({str(self)!r})"

    # ---- properties ---------------------------------------------------------------------------
    @property
    def is_int(self) -> bool:
        return self.kind in (KIND_INT, KIND_UINT)

    @property
    def is_float(self) -> bool:
        return self.kind in (KIND_FLOAT, KIND_E8M0)

    @property
    def is_signed(self) -> bool:
        return self.kind in (KIND_INT, KIND_FLOAT)

    @property
    def id(self) -> int:
        """Stable integer id, identical to ``humming::DType::id()`` in C++."""
        return (self.kind << 24) | (self.bits << 16) | (self.exp << 8) | self.man

    @property
    def ieee(self) -> bool:
        """Exponent all ones means infinity / NaN (IEEE rules)."""
        return self.kind == KIND_FLOAT and (self.exp, self.man) in ((5, 2), (5, 10), (8, 7), (8, 23))

    @property
    def fn(self) -> bool:
        """Only the all-ones pattern (either sign) is NaN; no infinity (float8_e4m3fn rules)."""
        return self.kind == KIND_FLOAT and (self.exp, self.man) == (4, 3)

    @property
    def bias(self) -> int:
        if self.kind == KIND_E8M0:
            return 127
        if self.kind == KIND_FLOAT:
            return (1 << (self.exp - 1)) - 1
        return 0

    @property
    def min_int(self) -> int:
        if self.kind == KIND_INT:
            return -(1 << (self.bits - 1))
        if self.kind == KIND_UINT:
            return 0
        raise FormatError(f"{self} is not an integer type")

    @property
    def max_int(self) -> int:
        if self.kind == KIND_INT:
            return (1 << (self.bits - 1)) - 1
        if self.kind == KIND_UINT:
            return (1 << self.bits) - 1
        raise FormatError(f"{self} is not an integer type")

    def decode(self, code: int) -> float:
        """Value of the bit pattern ``code`` (an unsigned integer of ``bits`` bits)."""
        if not 0 <= code < (1 << self.bits):
            raise FormatError(f"code {code} does not fit in {self.bits} bits of {self}")
        if self.kind == KIND_UINT:
            return float(code)
        if self.kind == KIND_INT:
            return float(code - (1 << self.bits) if code >> (self.bits - 1) else code)
        if self.kind == KIND_E8M0:
            return math.nan if code == 0xFF else math.ldexp(1.0, code - 127)
        sign = -1.0 if code >> (self.bits - 1) else 1.0
        e = (code >> self.man) & ((1 << self.exp) - 1)
        m = code & ((1 << self.man) - 1)
        emax_field = (1 << self.exp) - 1
        if self.ieee and e == emax_field:
            return sign * math.inf if m == 0 else math.nan
        if self.fn and e == emax_field and m == (1 << self.man) - 1:
            return math.nan
        if e == 0:
            return sign * math.ldexp(m, 1 - self.bias - self.man)
        return sign * math.ldexp((1 << self.man) + m, e - self.bias - self.man)

    @property
    def max_value(self) -> float:
        """Largest finite value."""
        if self.is_int:
            return float(self.max_int)
        if self.kind == KIND_E8M0:
            return math.ldexp(1.0, 254 - 127)
        if self.bits > 16:
            return 3.4028234663852886e38
        best = 0.0
        for code in range(1 << (self.bits - 1)):
            v = self.decode(code)
            if math.isfinite(v):
                best = max(best, v)
        return best

    def values(self) -> list[float]:
        """The value of every code of a type of at most 8 bits (index = code; inf/NaN included)."""
        if self.bits > 8:
            raise FormatError(f"{self} has more than 8 bits; values() lists small types only")
        return [self.decode(c) for c in range(1 << self.bits)]


def dtype(name: str | DType) -> DType:
    """Parse a data type name (see the module doc)."""
    if isinstance(name, DType):
        return name
    if not isinstance(name, str):
        raise FormatError(f"a data type is given by its name, got {type(name).__name__}; {_DTYPE_HELP}")
    s = name.strip().lower()
    named = {
        "f16": DType(KIND_FLOAT, 16, 5, 10),
        "bf16": DType(KIND_FLOAT, 16, 8, 7),
        "f32": DType(KIND_FLOAT, 32, 8, 23),
        "e8m0": DType(KIND_E8M0, 8, 8, 0),
    }
    if s in named:
        return named[s]
    m = re.fullmatch(r"([iu])(\d+)", s)
    if m:
        bits = int(m.group(2))
        if not 1 <= bits <= 8:
            raise FormatError(f"integer type {name!r} has {bits} bits; integer codes have 1 to 8 bits")
        return DType(KIND_INT if m.group(1) == "i" else KIND_UINT, bits)
    m = re.fullmatch(r"e(\d+)m(\d+)", s)
    if m:
        e, mm = int(m.group(1)), int(m.group(2))
        if e < 1 or 1 + e + mm > 8:
            raise FormatError(
                f"floating point type {name!r} needs 1 + {e} + {mm} bits; eXmY types have X >= 1 and "
                "1 + X + Y <= 8 (plus e8m0, f16, bf16, f32)"
            )
        return DType(KIND_FLOAT, 1 + e + mm, e, mm)
    raise FormatError(f"unknown data type {name!r}; {_DTYPE_HELP}")


SCALE_TYPES = ("f16", "bf16", "f32", "e8m0", "e4m3")
ACT_TYPES = ("f16", "bf16", "e4m3", "e5m2", "i8")
OUT_TYPES = ("f16", "bf16", "f32")
ZERO_KINDS = ("none", "int", "float")


def _check_pow2_group(value: int, what: str) -> None:
    if value < 1 or value & (value - 1) or not 8 <= value <= 4096:
        raise FormatError(f"{what} is {value}; group sizes are powers of two from 8 to 4096")


@dataclasses.dataclass(frozen=True)
class WeightFormat:
    """How a weight is stored: codes, scales, zero points and an optional global scale.

    ``group_k``: inputs per scale along K; 0 means one scale per output channel (``gc``).
    ``group_n``: output channels per scale (1 except for block scales).
    ``scale``: scale type or None for unscaled codes. ``zero``: "none" | "int" | "float".
    """

    code: DType
    group_k: int = 0
    group_n: int = 1
    scale: DType | None = None
    zero: str = "none"
    global_scale: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", dtype(self.code))
        if self.scale is not None:
            object.__setattr__(self, "scale", dtype(self.scale))
        self.validate()

    def validate(self) -> None:
        c = self.code
        if c.bits > 8 or c.kind == KIND_E8M0:
            raise FormatError(
                f"weight code type {c} is not a quantized code; weight codes are i1..i8, u1..u8 or "
                "eXmY with at most 8 bits"
            )
        if self.zero not in ZERO_KINDS:
            raise FormatError(f"zero point kind {self.zero!r} is unknown; accepted: none, int, float")
        if self.scale is None:
            if self.group_k != 0 or self.group_n != 1:
                raise FormatError("a weight format without a scale type cannot have a scale granularity")
            if self.zero != "none" or self.global_scale:
                raise FormatError("zero points and a global scale need a scale type (-s{type})")
            if c.is_int:
                raise FormatError(f"integer codes ({c}) need a scale (e.g. {c}g128-sbf16)")
            return
        if str(self.scale) not in SCALE_TYPES:
            raise FormatError(f"scale type {self.scale} is not accepted; scale types: {', '.join(SCALE_TYPES)}")
        if self.group_k != 0:
            _check_pow2_group(self.group_k, "the K group size")
        if self.group_n != 1:
            if self.group_k == 0:
                raise FormatError("block scales (g{K}n{N}) need a K group size, e.g. g128n128")
            _check_pow2_group(self.group_n, "the N group size")
        if self.zero != "none" and c.kind != KIND_UINT:
            raise FormatError(
                f"zero points are for unsigned integer codes; {c} is not one (use u{c.bits} with -zi/-zf, "
                f"or {c} without a zero point)"
            )
        if self.zero == "float" and self.scale.kind == KIND_E8M0:
            raise FormatError("float zero points are stored in the scale type, which cannot be e8m0")

    @property
    def per_channel(self) -> bool:
        return self.scale is not None and self.group_k == 0

    @property
    def granularity(self) -> str:
        if self.scale is None:
            return ""
        if self.group_k == 0:
            return "gc"
        return f"g{self.group_k}" + (f"n{self.group_n}" if self.group_n != 1 else "")

    def __str__(self) -> str:
        s = str(self.code)
        if self.scale is not None:
            s += f"{self.granularity}-s{self.scale}"
        if self.zero != "none":
            s += "-z" + self.zero[0]
        if self.global_scale:
            s += "-gs"
        return s

    @classmethod
    def parse(cls, text: str) -> "WeightFormat":
        return parse_weight_format(text)


_WF_RE = re.compile(
    r"(?P<code>[iu]\d+|e\d+m\d+)(?:(?P<gran>gc|g\d+(?:n\d+)?)-s(?P<scale>[a-z0-9]+))?"
    r"(?:-z(?P<zero>[if]))?(?P<gs>-gs)?"
)

_WF_HELP = (
    "weight formats look like {code}[{granularity}-s{scale}][-z{i|f}][-gs], e.g. u4g128-sbf16, "
    "u4g128-sf16-zi, e2m1g32-se8m0, e2m1g16-se4m3-gs, e4m3g128n128-sf32, e4m3"
)


def parse_weight_format(text: str | WeightFormat) -> WeightFormat:
    if isinstance(text, WeightFormat):
        return text
    if not isinstance(text, str):
        raise FormatError(f"a weight format is a string, got {type(text).__name__}; {_WF_HELP}")
    m = _WF_RE.fullmatch(text.strip().lower())
    if not m:
        raise FormatError(f"cannot parse weight format {text!r}; {_WF_HELP}")
    code = dtype(m.group("code"))
    gran = m.group("gran")
    group_k, group_n = 0, 1
    if gran and gran != "gc":
        gm = re.fullmatch(r"g(\d+)(?:n(\d+))?", gran)
        group_k = int(gm.group(1))
        group_n = int(gm.group(2)) if gm.group(2) else 1
        if group_k == 0:
            raise FormatError(f"K group size 0 in {text!r}; write gc for one scale per output channel")
    scale = dtype(m.group("scale")) if m.group("scale") else None
    zero = {"i": "int", "f": "float", None: "none"}[m.group("zero")]
    return WeightFormat(code, group_k, group_n, scale, zero, bool(m.group("gs")))


@dataclasses.dataclass(frozen=True)
class ActivationFormat:
    """Activation type and the granularity of its fp32 scales.

    ``granularity``: "none" (unquantized), "token" (one scale per row), or "group" (one scale per
    ``group_k`` inputs of a row).
    """

    type: DType
    granularity: str = "none"
    group_k: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", dtype(self.type))
        self.validate()

    def validate(self) -> None:
        t = str(self.type)
        if t not in ACT_TYPES:
            raise FormatError(f"activation type {t} is not accepted; activation types: {', '.join(ACT_TYPES)}")
        if self.granularity not in ("none", "token", "group"):
            raise FormatError(
                f"activation scale granularity {self.granularity!r} is unknown; accepted: none, token, group"
            )
        quantized = t in ("e4m3", "e5m2", "i8")
        if quantized and self.granularity == "none":
            raise FormatError(f"quantized activations ({t}) need scales: per token ({t}-pt) or per K group ({t}-g128)")
        if not quantized and self.granularity != "none":
            raise FormatError(f"{t} activations are not quantized and take no scales; write {t}")
        if self.granularity == "group":
            _check_pow2_group(self.group_k, "the activation K group size")
        elif self.group_k != 0:
            raise FormatError("group_k is only set for per-group activation scales")

    @property
    def quantized(self) -> bool:
        return self.granularity != "none"

    def __str__(self) -> str:
        if self.granularity == "token":
            return f"{self.type}-pt"
        if self.granularity == "group":
            return f"{self.type}-g{self.group_k}"
        return str(self.type)

    @classmethod
    def parse(cls, text: str) -> "ActivationFormat":
        return parse_activation_format(text)


_AF_HELP = "activation formats look like bf16, f16, e4m3-pt, e4m3-g128, e5m2-pt, i8-pt"


def parse_activation_format(text: str | ActivationFormat) -> ActivationFormat:
    if isinstance(text, ActivationFormat):
        return text
    if not isinstance(text, str):
        raise FormatError(f"an activation format is a string, got {type(text).__name__}; {_AF_HELP}")
    m = re.fullmatch(r"([a-z0-9]+)(?:-(pt|g\d+))?", text.strip().lower())
    if not m:
        raise FormatError(f"cannot parse activation format {text!r}; {_AF_HELP}")
    t = dtype(m.group(1))
    g = m.group(2)
    if g is None:
        return ActivationFormat(t)
    if g == "pt":
        return ActivationFormat(t, "token")
    return ActivationFormat(t, "group", int(g[1:]))


@dataclasses.dataclass(frozen=True)
class GemmFormat:
    """Activation, weight and output formats of one GEMM."""

    act: ActivationFormat
    weight: WeightFormat
    out: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "act", parse_activation_format(self.act))
        object.__setattr__(self, "weight", parse_weight_format(self.weight))
        object.__setattr__(self, "out", dtype(self.out))
        if str(self.out) not in OUT_TYPES:
            raise FormatError(f"output type {self.out} is not accepted; output types: {', '.join(OUT_TYPES)}")
        if (
            self.act.granularity == "group"
            and self.weight.group_k not in (0,)
            and (self.weight.group_k % self.act.group_k and self.act.group_k % self.weight.group_k)
        ):
            raise FormatError(
                f"activation group {self.act.group_k} and weight group {self.weight.group_k} do not nest; one "
                "must divide the other"
            )

    def __str__(self) -> str:
        return f"a-{self.act}_w-{self.weight}_c-{self.out}"

    @classmethod
    def parse(cls, text: str) -> "GemmFormat":
        return parse_gemm_format(text)


def parse_gemm_format(text: str | GemmFormat) -> GemmFormat:
    if isinstance(text, GemmFormat):
        return text
    return _parse_gemm_text(str(text))


# Parsed once per distinct text: ha.gemm and the dispatcher parse the format of every call, and
# parsing (about 30 us) was most of a call's host time. GemmFormat is frozen, so sharing is safe;
# a bad text raises each time (lru_cache keeps no exceptions).
@functools.lru_cache(maxsize=1024)
def _parse_gemm_text(text: str) -> GemmFormat:
    m = re.fullmatch(r"a-([^_]+)_w-([^_]+)_c-([^_]+)", text.strip().lower())
    if not m:
        raise FormatError(f"cannot parse GEMM format {text!r}; GEMM formats look like a-bf16_w-u4g128-sbf16_c-bf16")
    return GemmFormat(m.group(1), m.group(2), m.group(3))


# ---- support matrix -----------------------------------------------------------------------------
# Which activation types the tensor cores of each architecture family take, and so which
# weight/activation pairs a fast (tensor-core) backend can run there. The generic backend runs every
# valid pair on every family; this matrix is about the fast backends.
ARCH_FAMILIES = {
    "sm80": {"archs": ("80", "86", "87"), "act": ("f16", "bf16", "i8")},
    "sm89": {"archs": ("89",), "act": ("f16", "bf16", "i8", "e4m3", "e5m2")},
    "sm90": {"archs": ("90", "90a"), "act": ("f16", "bf16", "i8", "e4m3", "e5m2")},
    "sm100": {"archs": ("100", "100a", "103a"), "act": ("f16", "bf16", "i8", "e4m3", "e5m2")},
    "sm120": {"archs": ("120", "120a"), "act": ("f16", "bf16", "i8", "e4m3", "e5m2")},
}


def arch_family(arch: str | int) -> str:
    a = str(arch).lower().removeprefix("sm_").removeprefix("sm")
    for fam, info in ARCH_FAMILIES.items():
        if a in info["archs"]:
            return fam
    known = ", ".join(a for info in ARCH_FAMILIES.values() for a in info["archs"])
    raise FormatError(f"unknown GPU architecture {arch!r}; known: {known}")


@functools.lru_cache(maxsize=None)
def _max_finite(t: DType) -> float:
    # max_value scans every code (32768 for f16/bf16); support() asks for it often.
    return t.max_value


def _exact_in(value: float, t: DType) -> bool:
    """Whether ``value`` is a finite value of the floating point type ``t``."""
    if value == 0:
        return True
    a = abs(value)
    if a > _max_finite(t):
        return False
    # The spacing of t's values around a: 2**(e - man) in binade 2**e, never below the subnormal
    # spacing 2**(1 - bias - man). a is representable iff it is a multiple of that spacing.
    e = math.frexp(a)[1] - 1
    quantum = math.ldexp(1.0, max(e, 1 - t.bias) - t.man)
    return (a / quantum).is_integer()


def _code_range(code: DType, zero: str) -> tuple[int, int]:
    """Range of (code - zero) for integer codes, zero points included."""
    if code.kind == KIND_INT:
        return code.min_int, code.max_int
    if zero == "none":  # implied zero point 2**(bits-1)
        return -(1 << (code.bits - 1)), (1 << (code.bits - 1)) - 1
    return -code.max_int, code.max_int


def _fits(code: DType, zero: str, act: DType) -> bool:
    """Whether every dequantized code value (before scaling) is exact in the activation type."""
    if act.kind == KIND_INT:  # int8 tensor cores: integer codes whose (code - zero) fits in i8
        if not code.is_int:
            return False
        lo, hi = _code_range(code, zero)
        return lo >= -128 and hi <= 127
    if code.is_int:  # float activations: integers are exact up to 2**(man+1) (256 for bf16)
        lo, hi = _code_range(code, zero)
        return max(-lo, hi) <= (1 << (act.man + 1))
    # FP codes are checked value by value: field widths alone mislead at the top of the range
    # (e5m1's largest value 98304 is beyond both e5m2 and f16, whose top exponent is infinity, and
    # e6m1 or e7m0 exceed f16 entirely), so "f16 holds every 8-bit code" is not true.
    return all(_exact_in(v, act) for v in code.values() if math.isfinite(v))


def support(arch: str | int, fmt: GemmFormat | str) -> tuple[bool, str]:
    """(runnable on tensor cores of this family, reason). The generic backend runs every valid format."""
    fmt = parse_gemm_format(fmt)
    fam = arch_family(arch)
    acts = ARCH_FAMILIES[fam]["act"]
    a = str(fmt.act.type)
    if a not in acts:
        return False, f"{fam} tensor cores take activations {', '.join(acts)}, not {a}"
    if fmt.weight.zero == "float" and fmt.act.quantized:
        return False, "float zero points cannot be applied in the integer/fp8 domain of quantized activations"
    if not _fits(fmt.weight.code, fmt.weight.zero, fmt.act.type):
        return False, f"weight codes {fmt.weight.code} are not exact in the {a} operand type"
    return True, f"{fam} tensor cores run {a} x {fmt.weight.code}"
