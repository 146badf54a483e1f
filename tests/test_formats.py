"""Tests of humming_aot.formats: names, parsing, validation, decoding and the support matrix.

Expected values come from closed forms (OCP MX / IEEE definitions) and from torch's own float types,
never from the module under test.
"""

import itertools
import math

import pytest
import torch

from humming_aot import formats as F

INT_CODES = [f"{s}{b}" for s in "iu" for b in range(1, 9)]
FLOAT_CODES = [f"e{x}m{y}" for x in range(1, 8) for y in range(0, 8 - x)]
CODE_TYPES = INT_CODES + FLOAT_CODES
GRANULARITIES = [(0, 1), (8, 1), (32, 1), (128, 1), (4096, 1), (128, 128), (64, 8)]  # (group_k, group_n)
SCALE_NAMES = ["f16", "bf16", "f32", "e8m0", "e4m3"]
ZEROS = ["none", "int", "float"]


def _expected_valid(code: str, scale, group_k: int, group_n: int, zero: str, gs: bool) -> bool:
    """Validity of a weight format, written from the grammar in the module doc (independent rules)."""
    if scale is None:
        return code.startswith("e") and (group_k, group_n) == (0, 1) and zero == "none" and not gs
    if zero != "none" and not code.startswith("u"):
        return False
    if zero == "float" and scale == "e8m0":
        return False
    return True


# ---- data types -----------------------------------------------------------------------------------


def test_dtype_names_round_trip():
    for name in CODE_TYPES + ["e8m0", "f16", "bf16", "f32"]:
        dt = F.dtype(name)
        assert str(dt) == name
        assert F.dtype(str(dt)) == dt
        assert F.dtype(dt) is dt
    assert F.dtype(" E4M3 ") == F.dtype("e4m3")


@pytest.mark.parametrize(
    "name, message",
    [
        ("i9", "has 9 bits; integer codes have 1 to 8 bits"),
        ("u0", "has 0 bits"),
        ("e5m3", r"needs 1 \+ 5 \+ 3 bits"),
        ("e0m3", "X >= 1"),
        ("f8", "unknown data type 'f8'"),
        ("int4", "unknown data type"),
    ],
)
def test_dtype_errors(name, message):
    with pytest.raises(F.FormatError, match=message):
        F.dtype(name)
    with pytest.raises(F.FormatError, match="by its name"):
        F.dtype(4)


def test_integer_decode_and_ranges():
    i4 = F.dtype("i4")
    assert [i4.decode(c) for c in range(16)] == [0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1]
    assert i4.decode(0xF) == -1.0
    assert (i4.min_int, i4.max_int) == (-8, 7)
    u4 = F.dtype("u4")
    assert [u4.decode(c) for c in range(16)] == list(range(16))
    assert (u4.min_int, u4.max_int) == (0, 15)
    i1 = F.dtype("i1")
    assert [i1.decode(0), i1.decode(1)] == [0.0, -1.0]
    for b in range(1, 9):
        i, u = F.dtype(f"i{b}"), F.dtype(f"u{b}")
        # two's complement: code c >= 2**(b-1) is c - 2**b
        assert i.values() == [float(c - (1 << b) if c >= 1 << (b - 1) else c) for c in range(1 << b)]
        assert u.values() == [float(c) for c in range(1 << b)]
        assert i.max_value == 2 ** (b - 1) - 1 and u.max_value == 2**b - 1
    with pytest.raises(F.FormatError, match="does not fit in 4 bits"):
        u4.decode(16)
    with pytest.raises(F.FormatError, match="not an integer type"):
        F.dtype("e2m1").max_int


def test_small_float_decode_closed_forms():
    e2m1 = F.dtype("e2m1")
    assert [e2m1.decode(c) for c in range(8)] == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert [e2m1.decode(c | 8) for c in range(8)] == [-0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert math.copysign(1.0, e2m1.decode(8)) == -1.0  # 0b1000 is negative zero
    assert e2m1.max_value == 6.0 and e2m1.bias == 1
    # OCP MX FP6: e3m2 max 28, min subnormal 0.0625; e2m3 max 7.5, min subnormal 0.125
    e3m2, e2m3 = F.dtype("e3m2"), F.dtype("e2m3")
    assert e3m2.max_value == 28.0 and e3m2.decode(1) == 0.0625 and e3m2.decode(0x1F) == 28.0
    assert e2m3.max_value == 7.5 and e2m3.decode(1) == 0.125 and e2m3.decode(0x1F) == 7.5
    # every pattern of the MX types is finite
    for dt in (e2m1, e3m2, e2m3):
        assert all(math.isfinite(v) for v in dt.values())


def _closed_form_max(x: int, y: int) -> float:
    # All patterns finite: the largest is exponent field 2**x - 1 and mantissa all ones.
    bias = 2 ** (x - 1) - 1
    return (2 - 2.0**-y) * 2.0 ** (2**x - 1 - bias)


def test_float_types_monotone_and_symmetric():
    for name in FLOAT_CODES:
        dt = F.dtype(name)
        half = 1 << (dt.bits - 1)
        vals = dt.values()
        finite = [v for v in vals[:half] if math.isfinite(v)]
        assert all(a < b for a, b in zip(finite, finite[1:])), name
        for c in range(half):
            if math.isfinite(vals[c]):
                assert vals[c | half] == -vals[c]
        if name not in ("e4m3", "e5m2"):
            assert dt.max_value == _closed_form_max(dt.exp, dt.man), name
        # smallest positive value is the smallest subnormal 2**(1 - bias - man)
        assert vals[1] == 2.0 ** (1 - (2 ** (dt.exp - 1) - 1) - dt.man), name


@pytest.mark.parametrize("name, tdtype", [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)])
def test_fp8_decode_matches_torch(name, tdtype):
    dt = F.dtype(name)
    ref = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(tdtype).double().tolist()
    ours = dt.values()
    for c in range(256):
        if math.isnan(ref[c]):
            assert math.isnan(ours[c]), c
        else:
            assert ours[c] == ref[c] and math.copysign(1, ours[c]) == math.copysign(1, ref[c]), c
    assert dt.max_value == torch.finfo(tdtype).max


def test_fp8_special_values():
    e4m3, e5m2 = F.dtype("e4m3"), F.dtype("e5m2")
    assert e4m3.max_value == 448.0
    assert math.isnan(e4m3.decode(0x7F)) and math.isnan(e4m3.decode(0xFF))
    assert e4m3.decode(0x7E) == 448.0
    assert e5m2.decode(0x7C) == math.inf and e5m2.decode(0xFC) == -math.inf
    assert math.isnan(e5m2.decode(0x7D))
    assert e5m2.max_value == 57344.0


@pytest.mark.parametrize("name, tdtype", [("f16", torch.float16), ("bf16", torch.bfloat16)])
def test_16_bit_decode_matches_torch(name, tdtype):
    dt = F.dtype(name)
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)  # wraps to the same bit patterns
    ref = bits.view(tdtype).double().tolist()
    for c in range(0, 65536, 7):  # a stride coprime to every field boundary still visits all of them
        v = dt.decode(c)
        assert (math.isnan(v) and math.isnan(ref[c])) or v == ref[c], c
    for c in (0x7C00, 0x7BFF, 0x0001, 0x8001, 0xFC00) if name == "f16" else (0x7F80, 0x7F7F, 0x0001, 0xFF80):
        v = dt.decode(c)
        assert (math.isnan(v) and math.isnan(ref[c])) or v == ref[c], c
    assert dt.max_value == torch.finfo(tdtype).max
    with pytest.raises(F.FormatError, match="more than 8 bits"):
        dt.values()


def test_e8m0():
    e8m0 = F.dtype("e8m0")
    assert e8m0.decode(127) == 1.0
    assert e8m0.decode(0) == 2.0**-127
    assert e8m0.decode(254) == 2.0**127
    assert e8m0.decode(130) == 8.0
    assert math.isnan(e8m0.decode(255))
    assert e8m0.bias == 127 and not e8m0.is_signed


# ---- weight formats -------------------------------------------------------------------------------


def test_weight_format_round_trip_and_validity_everywhere():
    n_valid = 0
    for code, (gk, gn), scale, zero, gs in itertools.product(
        CODE_TYPES, GRANULARITIES, SCALE_NAMES + [None], ZEROS, (False, True)
    ):
        valid = _expected_valid(code, scale, gk, gn, zero, gs)
        if not valid:
            with pytest.raises(F.FormatError):
                F.WeightFormat(code, gk, gn, scale, zero, gs)
            continue
        f = F.WeightFormat(code, gk, gn, scale, zero, gs)
        s = str(f)
        assert F.parse_weight_format(s) == f, s
        assert F.WeightFormat.parse(s.upper()) == f
        assert str(F.parse_weight_format(s)) == s
        n_valid += 1
    assert n_valid > 3000


@pytest.mark.parametrize(
    "text, fields",
    [
        ("u4g128-sbf16", ("u4", 128, 1, "bf16", "none", False)),
        ("u4g128-sf16-zi", ("u4", 128, 1, "f16", "int", False)),
        ("u8gc-sf32-zf", ("u8", 0, 1, "f32", "float", False)),
        ("i4g128-sf16", ("i4", 128, 1, "f16", "none", False)),
        ("e2m1g32-se8m0", ("e2m1", 32, 1, "e8m0", "none", False)),
        ("e2m1g16-se4m3-gs", ("e2m1", 16, 1, "e4m3", "none", True)),
        ("e4m3g128n128-sf32", ("e4m3", 128, 128, "f32", "none", False)),
        ("e4m3", ("e4m3", 0, 1, None, "none", False)),
    ],
)
def test_weight_format_examples(text, fields):
    f = F.parse_weight_format(text)
    code, gk, gn, scale, zero, gs = fields
    assert str(f.code) == code and f.group_k == gk and f.group_n == gn
    assert (str(f.scale) if f.scale else None) == scale
    assert f.zero == zero and f.global_scale == gs
    assert f.per_channel == (scale is not None and gk == 0)
    assert str(f) == text


@pytest.mark.parametrize(
    "text, message",
    [
        ("u4g100-sbf16", "K group size is 100; group sizes are powers of two from 8 to 4096"),
        ("u4g4-sbf16", "powers of two from 8 to 4096"),
        ("u4g8192-sbf16", "powers of two from 8 to 4096"),
        ("u4g128n3-sbf16", "N group size is 3"),
        ("u4g0-sf16", "K group size 0.*write gc"),
        ("u4", r"integer codes \(u4\) need a scale"),
        ("i4g128-sf16-zi", "zero points are for unsigned integer codes; i4 is not one"),
        ("e2m1g32-se8m0-zi", "zero points are for unsigned integer codes"),
        ("u4g128-se8m0-zf", "float zero points.*cannot be e8m0"),
        ("u4g128-se5m2", "scale type e5m2 is not accepted; scale types: f16, bf16, f32, e8m0, e4m3"),
        ("u4g128-sf8", "unknown data type 'f8'"),
        ("e8m0g32-sf16", "e8m0 is not a quantized code"),
        ("u9g128-sf16", "has 9 bits"),
        ("e5m3", r"needs 1 \+ 5 \+ 3 bits"),
        ("u4g128", "cannot parse weight format 'u4g128'; weight formats look like"),
        ("f16", "cannot parse weight format"),
        ("u4gcn128-sf16", "cannot parse weight format"),
        ("e2m1-gs", "a global scale need a scale type"),
    ],
)
def test_weight_format_errors(text, message):
    with pytest.raises(F.FormatError, match=message):
        F.parse_weight_format(text)


def test_weight_format_constructor_errors():
    with pytest.raises(F.FormatError, match="zero point kind 'half' is unknown; accepted: none, int, float"):
        F.WeightFormat("u4", 128, 1, "f16", "half")
    with pytest.raises(F.FormatError, match="block scales .* need a K group size"):
        F.WeightFormat("u4", 0, 128, "f16")
    with pytest.raises(F.FormatError, match="without a scale type cannot have a scale granularity"):
        F.WeightFormat("e4m3", 128)
    with pytest.raises(F.FormatError, match="is a string"):
        F.parse_weight_format(128)
    with pytest.raises(F.FormatError, match="f16 is not a quantized code"):
        F.WeightFormat("f16", 128, 1, "f16")


# ---- activation and GEMM formats ------------------------------------------------------------------


def test_activation_format_round_trip():
    seen = 0
    for t in F.ACT_TYPES:
        if t in ("f16", "bf16"):
            options = [F.ActivationFormat(t)]
        else:
            options = [F.ActivationFormat(t, "token")] + [F.ActivationFormat(t, "group", 1 << p) for p in range(3, 13)]
        for a in options:
            assert F.parse_activation_format(str(a)) == a
            assert F.ActivationFormat.parse(str(a).upper()) == a
            seen += 1
    assert seen == 2 + 3 * 11
    a = F.parse_activation_format("e4m3-g128")
    assert (str(a.type), a.granularity, a.group_k, a.quantized) == ("e4m3", "group", 128, True)
    assert F.parse_activation_format("bf16").quantized is False


@pytest.mark.parametrize(
    "text, message",
    [
        ("e4m3", r"quantized activations \(e4m3\) need scales"),
        ("i8", "need scales"),
        ("bf16-pt", "bf16 activations are not quantized and take no scales; write bf16"),
        ("u4-pt", "activation type u4 is not accepted; activation types: f16, bf16, e4m3, e5m2, i8"),
        ("e2m1-pt", "activation type e2m1 is not accepted"),
        ("i8-g100", "activation K group size is 100; group sizes are powers of two"),
        ("e4m3-pq", "cannot parse activation format 'e4m3-pq'"),
        ("e4m3_pt", "cannot parse activation format"),
    ],
)
def test_activation_format_errors(text, message):
    with pytest.raises(F.FormatError, match=message):
        F.parse_activation_format(text)


def test_activation_format_constructor_errors():
    with pytest.raises(F.FormatError, match="granularity 'row' is unknown; accepted: none, token, group"):
        F.ActivationFormat("e4m3", "row")
    with pytest.raises(F.FormatError, match="group_k is only set for per-group"):
        F.ActivationFormat("e4m3", "token", 128)
    with pytest.raises(F.FormatError, match="is a string"):
        F.parse_activation_format(None)


def test_gemm_format_round_trip():
    for act, w, out in itertools.product(
        ["bf16", "f16", "e4m3-pt", "i8-g64", "e5m2-g128"],
        ["u4g128-sbf16", "u4g64-sf16-zi", "e2m1g32-se8m0", "e2m1g16-se4m3-gs", "e4m3g128n128-sf32", "e4m3"],
        F.OUT_TYPES,
    ):
        g = F.GemmFormat(act, w, out)
        s = str(g)
        assert s == f"a-{act}_w-{w}_c-{out}"
        assert F.parse_gemm_format(s) == g
        assert F.GemmFormat.parse(s) == g


def test_gemm_format_errors():
    with pytest.raises(F.FormatError, match="output type e4m3 is not accepted; output types: f16, bf16, f32"):
        F.parse_gemm_format("a-bf16_w-u4g128-sbf16_c-e4m3")
    with pytest.raises(F.FormatError, match="cannot parse GEMM format.*look like a-bf16_w-u4g128-sbf16_c-bf16"):
        F.parse_gemm_format("a-bf16_w-u4g128-sbf16")
    with pytest.raises(F.FormatError, match="cannot parse weight format"):
        F.parse_gemm_format("a-bf16_w-u4q128_c-bf16")


# ---- architectures and support --------------------------------------------------------------------


def test_arch_family():
    assert F.arch_family("sm_90a") == "sm90"
    assert F.arch_family("SM90") == "sm90"
    assert F.arch_family(80) == "sm80"
    assert F.arch_family("86") == "sm80"
    assert F.arch_family("sm89") == "sm89"
    assert F.arch_family("sm_100a") == "sm100"
    assert F.arch_family("120a") == "sm120"
    for bad in ("sm_75", "sm70", "hopper", 91):
        with pytest.raises(F.FormatError, match="unknown GPU architecture .*; known: 80, 86, 87, 89, 90"):
            F.arch_family(bad)
    with pytest.raises(F.FormatError, match="unknown GPU architecture"):
        F.support("sm_75", "a-bf16_w-u4g128-sbf16_c-bf16")


def test_support_examples():
    ok, why = F.support("sm80", "a-e4m3-pt_w-e2m1g32-se8m0_c-bf16")
    assert not ok and "sm80 tensor cores take activations f16, bf16, i8, not e4m3" in why
    ok, why = F.support("sm90", "a-e4m3-pt_w-e2m1g16-se4m3-gs_c-bf16")
    assert ok, why
    ok, why = F.support("sm90a", "a-i8-pt_w-e2m1g32-se8m0_c-bf16")
    assert not ok and "not exact in the i8" in why
    assert F.support("sm80", "a-bf16_w-u4g128-sbf16_c-bf16")[0]
    assert F.support("sm80", "a-i8-pt_w-i8gc-sf32_c-f16")[0]
    ok, why = F.support("sm90", "a-e4m3-pt_w-u4g128-sf16-zf_c-bf16")
    assert not ok and "float zero points" in why
    assert F.support("sm100", F.parse_gemm_format("a-f16_w-u4g128-sf16-zf_c-f16"))[0]


def _int_value_range(dt, zero):
    """Range of (code - zero) of an integer code type, from the module doc's definitions."""
    if dt.kind == F.KIND_INT:
        return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1
    if zero == "none":  # unsigned codes without zero points: implied zero 2**(bits-1)
        return -(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1
    span = 2**dt.bits - 1  # the stored zero may be any code
    return -span, span


def _exact_in_torch(values, tdtype) -> bool:
    """Whether every value survives a round trip through a torch dtype unchanged."""
    t = torch.tensor(values, dtype=torch.float64)
    back = t.to(tdtype).double()
    return bool(torch.equal(back, t))


_TORCH_ACT = {"f16": torch.float16, "bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


@pytest.mark.parametrize("act", ["f16", "bf16", "e4m3-pt", "e5m2-pt"])
def test_support_matches_exactness_of_float_activation_types(act):
    """Tensor cores run a pair only when every (code - zero) value is exact in the activation type.

    The expectation is computed with torch's casts, independently of the rule in formats.
    """
    a_type = act.split("-")[0]
    tdtype = _TORCH_ACT[a_type]
    for code in CODE_TYPES:
        dt = F.dtype(code)
        zero_kinds = ["none", "int"] if code.startswith("u") else ["none"]
        for zero in zero_kinds:
            if dt.is_int:
                lo, hi = _int_value_range(dt, zero)
                values = [float(v) for v in range(lo, hi + 1)]
            else:
                values = [v for v in dt.values() if math.isfinite(v)]
            fmt = f"a-{act}_w-{F.WeightFormat(dt, 32, 1, 'bf16', zero)}_c-bf16"
            ok, why = F.support("sm90", fmt)
            assert ok == _exact_in_torch(values, tdtype), (fmt, why)


def test_support_matches_int8_range():
    for code in INT_CODES:
        dt = F.dtype(code)
        for zero in ["none", "int"] if code.startswith("u") else ["none"]:
            lo, hi = _int_value_range(dt, zero)
            fmt = f"a-i8-pt_w-{F.WeightFormat(dt, 32, 1, 'f16', zero)}_c-f16"
            assert F.support("sm80", fmt)[0] == (-128 <= lo and hi <= 127), fmt
    for code in FLOAT_CODES:
        assert not F.support("sm80", f"a-i8-pt_w-{code}g32-sf16_c-f16")[0]
