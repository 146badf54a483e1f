"""Tests of the reference quantizer and GEMM (humming_aot.reference).

The reference is the oracle of the project, so it is checked here against independent computations:
torch's own casts, closed-form values, brute-force nearest-grid searches and float64 matmuls, with
group membership recomputed from index arithmetic rather than the module's helpers.
"""

import math

import pytest
import torch

from humming_aot import formats as F
from humming_aot import reference as R

INT_CODES = [f"{s}{b}" for s in "iu" for b in range(1, 9)]
FLOAT_CODES = [f"e{x}m{y}" for x in range(1, 8) for y in range(0, 8 - x)]
SMALL_TYPES = INT_CODES + FLOAT_CODES + ["e8m0"]
U32 = 2.0**-24  # unit roundoff of float32


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- independent helpers --------------------------------------------------------------------------


def scale_values64(scales, st):
    """float64 values of stored scales, decoded here without the module (e8m0: 2**(byte - 127))."""
    if str(st) == "e8m0":
        return torch.tensor([[2.0 ** (b - 127) for b in row] for row in scales.tolist()], dtype=torch.float64)
    return scales.double()


def per_element(group_tensor, fmt, N, K):
    """Broadcast a per-group tensor to [N, K] by index arithmetic g = (n // group_n, k // group_k)."""
    gk = fmt.group_k if fmt.group_k else K
    rows = torch.arange(N) // fmt.group_n
    cols = torch.arange(K) // gk
    return group_tensor[rows][:, cols]


def effective_scale(q):
    """float64 [N, K]: scale value times global scale for every element."""
    N, K = q.codes.shape
    s = per_element(scale_values64(q.scales, q.fmt.scale), q.fmt, N, K)
    if q.fmt.global_scale:
        s = s * float(q.global_scale)
    return s


def zero_points(q):
    N, K = q.codes.shape
    if q.fmt.zero == "none":
        # unsigned integer codes without stored zeros are symmetric: implied zero 2**(bits-1)
        implied = 2 ** (q.fmt.code.bits - 1) if q.fmt.code.kind == F.KIND_UINT else 0
        return torch.full((N, K), float(implied), dtype=torch.float64)
    return per_element(scale_values64(q.zeros, q.fmt.scale) if q.fmt.zero == "float" else q.zeros.double(), q.fmt, N, K)


def finite_code_values(dt):
    """(codes, values) of the finite values of a small type, from formats' closed-form decoder."""
    table = dt.values()
    codes = [c for c, v in enumerate(table) if math.isfinite(v)]
    return codes, torch.tensor([table[c] for c in codes], dtype=torch.float64)


def group_slices(fmt, N, K):
    """Yield (gi, gj, row slice, col slice) for every group, partial ones included."""
    gk = fmt.group_k if fmt.group_k else K
    for gi in range(-(-N // fmt.group_n)):
        for gj in range(-(-K // gk)):
            yield gi, gj, slice(gi * fmt.group_n, min(N, (gi + 1) * fmt.group_n)), slice(gj * gk, min(K, (gj + 1) * gk))


def half_ulp(a, dt):
    """Half the spacing of the type's values at magnitude a (float64 tensor, a >= 0)."""
    bias = 2 ** (dt.exp - 1) - 1
    e = torch.floor(torch.log2(a.clamp(min=1e-300)))
    e = torch.maximum(e, torch.full_like(e, 1 - bias))
    return 0.5 * torch.exp2(e - dt.man)


# ---- torch_dtype, decode, encode ------------------------------------------------------------------


def test_torch_dtype_table():
    assert R.torch_dtype("f16") == torch.float16
    assert R.torch_dtype("bf16") == torch.bfloat16
    assert R.torch_dtype(F.dtype("f32")) == torch.float32
    assert R.torch_dtype("e4m3") == torch.float8_e4m3fn
    assert R.torch_dtype("e5m2") == torch.float8_e5m2
    assert R.torch_dtype("i8") == torch.int8
    assert R.torch_dtype("e8m0") == torch.uint8
    with pytest.raises(F.FormatError, match="u4 has no torch storage dtype of its own; accepted: f16"):
        R.torch_dtype("u4")


def test_decode_against_closed_forms_and_torch():
    e2m1 = R.decode(torch.arange(16, dtype=torch.uint8), "e2m1")
    assert e2m1.tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert e2m1.dtype == torch.float32
    assert R.decode(torch.tensor([0, 7, 8, 15], dtype=torch.uint8), "i4").tolist() == [0, 7, -8, -1]
    assert R.decode(torch.tensor([127, 128, 0], dtype=torch.uint8), "e8m0").tolist() == [1.0, 2.0, 2.0**-127]
    allc = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for name, tdt in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
        ours, ref = R.decode(allc, name), allc.view(tdt).float()
        assert torch.equal(ours.isnan(), ref.isnan())
        ok = ~ref.isnan()
        assert torch.equal(ours[ok], ref[ok])
        assert torch.equal(torch.signbit(ours[ok]), torch.signbit(ref[ok]))


def test_decode_errors():
    with pytest.raises(ValueError, match="code 16 does not fit in the 4 bits of u4; codes are 0..15"):
        R.decode(torch.tensor([16], dtype=torch.uint8), "u4")
    with pytest.raises(TypeError, match="dtype torch.uint8"):
        R.decode(torch.tensor([1], dtype=torch.int32), "u4")
    with pytest.raises(F.FormatError, match="f16 is not a code type"):
        R.decode(torch.tensor([1], dtype=torch.uint8), "f16")


@pytest.mark.parametrize("name", SMALL_TYPES)
def test_encode_decode_round_trip_every_code(name):
    dt = F.dtype(name)
    codes = torch.tensor(finite_code_values(dt)[0], dtype=torch.int32).to(torch.uint8)
    vals = R.decode(codes, dt)
    back = R.encode(vals, dt)
    # Compare values (so +0/-0 could differ), then the codes, which also keep the sign of zero.
    assert torch.equal(R.decode(back, dt), vals)
    assert torch.equal(torch.signbit(R.decode(back, dt)), torch.signbit(vals))
    assert torch.equal(back, codes)


def _mantissa_field(v, dt):
    """Mantissa field of a non-negative value of an eXmY type, derived from the value alone."""
    bias = 2 ** (dt.exp - 1) - 1
    if v < 2.0 ** (1 - bias):  # subnormal (or zero): v = m * 2**(1 - bias - man)
        return v / 2.0 ** (1 - bias - dt.man)
    e = math.floor(math.log2(v))
    return v / 2.0 ** (e - dt.man) - 2**dt.man


@pytest.mark.parametrize("name", SMALL_TYPES)
def test_encode_ties_to_even(name):
    dt = F.dtype(name)
    _, vals = finite_code_values(dt)
    pos = sorted(set(v for v in vals.tolist() if v >= 0 or dt.kind == F.KIND_INT))
    mids = [(a + b) / 2 for a, b in zip(pos, pos[1:])]
    got = R.decode(R.encode(torch.tensor(mids, dtype=torch.float64), dt), dt).double().tolist()
    for (a, b), m, g in zip(zip(pos, pos[1:]), mids, got):
        assert g in (a, b), (m, g)
        if dt.is_int:
            assert g % 2 == 0, (name, m, g)  # round half to the even integer
        elif dt.kind == F.KIND_E8M0:
            assert (math.log2(g) + 127) % 2 == 0, (m, g)  # even exponent byte
        elif dt.man == 0:
            # no mantissa: the even code is the even exponent field (zero's field is 0)
            bias = 2 ** (dt.exp - 1) - 1
            field = 0 if g == 0 else math.log2(g) + bias
            assert field % 2 == 0, (name, m, g)
        else:
            assert _mantissa_field(g, dt) % 2 == 0, (name, m, g)
    if dt.kind == F.KIND_FLOAT:  # the same ties on the negative side, mirrored
        neg = R.decode(R.encode(-torch.tensor(mids, dtype=torch.float64), dt), dt).double().tolist()
        assert neg == [-g for g in got]


def test_encode_hand_examples():
    e2m1 = lambda xs: R.decode(R.encode(torch.tensor(xs), "e2m1"), "e2m1").tolist()
    assert e2m1([5.0, 0.25, -1.25, 2.5, 3.5, 0.74, 0.76, 100.0, -7.0]) == [4, 0, -1, 2, 4, 0.5, 1, 6, -6]
    i4 = lambda xs: R.decode(R.encode(torch.tensor(xs), "i4"), "i4").tolist()
    assert i4([0.5, 1.5, 2.5, -0.5, -1.5, 7.6, -9.0, 6.5]) == [0, 2, 2, 0, -2, 7, -8, 6]
    u2 = lambda xs: R.decode(R.encode(torch.tensor(xs), "u2"), "u2").tolist()
    assert u2([-1.0, 0.5, 1.5, 2.5, 9.0]) == [0, 0, 2, 2, 3]
    # e8m0 has no zero: everything at or below 2**-127 is the smallest code
    assert R.encode(torch.tensor([0.0, -3.0, 1.0, 3.0, 1e30]), "e8m0").tolist() == [0, 0, 127, 128, 227]


@pytest.mark.parametrize("name, tdt", [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)])
def test_encode_matches_torch_fp8_casts(name, tdt):
    dt = F.dtype(name)
    g = gen(1)
    # log-uniform magnitudes from deep in the subnormals to the maximum, both signs
    lo, hi = math.log2(dt.values()[1]) - 2, math.log2(dt.max_value)
    mag = torch.exp2(lo + (hi - lo) * torch.rand(20000, generator=g, dtype=torch.float64)).float()
    x = torch.where(torch.rand(20000, generator=g) < 0.5, -mag, mag)
    x = torch.cat([x, torch.tensor([0.0, -0.0, dt.max_value, -dt.max_value])])
    ours = R.encode(x, dt)
    ref = x.to(tdt).view(torch.uint8)
    assert torch.equal(ours, ref)
    # out of range saturates to the largest finite magnitude (torch's e5m2 cast would give inf)
    big = torch.tensor([dt.max_value * 1.5, -1e30])
    assert R.decode(R.encode(big, dt), dt).tolist() == [dt.max_value, -dt.max_value]


@pytest.mark.parametrize("name", INT_CODES)
def test_encode_integers_match_python_round(name):
    dt = F.dtype(name)
    x = torch.linspace(dt.min_int - 3, dt.max_int + 3, 997, dtype=torch.float64)
    x = torch.cat([x, torch.arange(dt.min_int, dt.max_int + 1) + 0.5])
    got = R.decode(R.encode(x, dt), dt).tolist()
    want = [min(max(round(v), dt.min_int), dt.max_int) for v in x.tolist()]  # Python rounds half to even
    assert got == want


def test_encode_errors():
    with pytest.raises(TypeError, match="floating point tensor"):
        R.encode(torch.tensor([1, 2]), "u4")
    with pytest.raises(F.FormatError, match="bf16 is not a code type"):
        R.encode(torch.tensor([1.0]), "bf16")


def test_scale_value_e8m0_and_types():
    b = torch.tensor([[127, 0, 254, 255, 130]], dtype=torch.uint8)
    v = R.scale_value(b, "u4g32-se8m0")
    assert v.dtype == torch.float32
    assert v[0, [0, 1, 2, 4]].tolist() == [1.0, 2.0**-127, 2.0**127, 8.0]
    assert math.isnan(v[0, 3])
    h = torch.tensor([[0.5, 3.0]], dtype=torch.float16)
    assert R.scale_value(h, F.parse_weight_format("u4g32-sf16")).tolist() == [[0.5, 3.0]]
    with pytest.raises(TypeError, match="e8m0 scales are stored as uint8 exponent bytes"):
        R.scale_value(h, "e8m0")
    with pytest.raises(TypeError, match="f16 scales are stored as torch.float16"):
        R.scale_value(h.float(), "u4g32-sf16")
    with pytest.raises(F.FormatError, match="has no scales"):
        R.scale_value(h, "e2m1")


# ---- weight quantization: generic properties over many formats ------------------------------------


def sweep_formats():
    """A few formats for every code type, covering every scale type, zero kind and granularity."""
    out = []
    grans = [(0, 1), (8, 1), (32, 1), (16, 8)]
    scales = ["f16", "bf16", "f32", "e8m0", "e4m3"]
    for i, code in enumerate(INT_CODES + FLOAT_CODES):
        for j in range(3):
            gk, gn = grans[(i + j) % len(grans)]
            st = scales[(i + 2 * j) % len(scales)]
            zero = "none"
            if code.startswith("u") and j > 0:
                zero = "int" if j == 1 or st == "e8m0" else "float"
            gs = (i + j) % 4 == 0
            out.append(str(F.WeightFormat(code, gk, gn, st, zero, gs)))
    out += ["e4m3", "e5m2", "e2m1", "e3m2"]  # bare FP codes, no scales
    return out


@pytest.mark.parametrize("fmt", sweep_formats())
def test_quantize_picks_nearest_grid_value(fmt):
    """Given the scales and zero points chosen, every code must be the nearest point of the grid.

    The grid of an element is {(v - zero) * scale * global} over every finite code value v, searched
    here by brute force in float64.
    """
    fmt = F.parse_weight_format(fmt)
    N, K = 12, 40  # partial groups along both N (group_n 8) and K (groups 32, 16)
    g = gen(hash(str(fmt)) % 1000)
    w = torch.randn(N, K, generator=g) * torch.exp2(torch.randint(-6, 6, (N, 1), generator=g).float())
    w[3] = 0.0  # an all-zero row: scale must stay finite and positive
    q = R.quantize_weight(w, fmt)
    q.validate()
    assert q.codes.shape == (N, K) and q.codes.dtype == torch.uint8
    dq = R.dequantize_weight(q)
    assert dq.dtype == torch.float32 and bool(torch.isfinite(dq).all())
    if fmt.zero != "float" or fmt.group_n == 1:
        # 0 is on every grid except one shifted by a fractional zero point; an all-zero row is an
        # all-zero group unless the group spans other rows
        assert torch.equal(dq[3], torch.zeros(K))
    _, values = finite_code_values(fmt.code)
    w64 = w.double()
    if fmt.scale is None:
        grid = values.view(1, 1, -1).expand(N, K, -1)
        eff = torch.ones(N, K, dtype=torch.float64)
    else:
        eff = effective_scale(q)
        assert bool((eff > 0).all()) and bool(torch.isfinite(eff).all())
        grid = (values.view(1, 1, -1) - zero_points(q).unsqueeze(-1)) * eff.unsqueeze(-1)
    best = (grid - w64.unsqueeze(-1)).abs().min(dim=-1).values
    err = (dq.double() - w64).abs()
    # slack: w / scale and the dequantized product are each rounded once in float32
    slack = 4 * U32 * (w64.abs() + eff)
    assert bool((err <= best + slack).all()), float((err - best - slack).max())


INT_BOUND_FORMATS = [
    "u4g128-sbf16",
    "u4g128-sf16-zi",
    "u4g128-sf16-zf",
    "i4g128-sf16",
    "i8gc-sf32",
    "u8g64-sbf16-zi",
    "i2g32-sf16",
    "u3g32-sf32-zf",
    "u4g64n16-sf16",
    "i6gc-sbf16",
    "u4g32-se4m3-zi",
    "i4g32-se4m3",
]


@pytest.mark.parametrize("fmt", INT_BOUND_FORMATS)
def test_integer_error_bound_and_scales(fmt):
    """Scales are the group range over the code span, rounded; the error is at most half a step.

    Rounding the scale (down) can leave the range a little wider than the grid: that excess, at most
    span * (scale rounding), is the only slack beyond half a step.
    """
    fmt = F.parse_weight_format(fmt)
    N, K = 40, 300
    g = gen(7)
    w = torch.randn(N, K, generator=g) * 0.05 + 0.01
    q = R.quantize_weight(w, fmt)
    st = fmt.scale
    svals = scale_values64(q.scales, st)
    code = fmt.code
    # asymmetric (stored zero): the whole code range; symmetric (iB, uB with implied zero): one side
    span = 2**code.bits - 1 if fmt.zero != "none" else 2 ** (code.bits - 1) - 1
    for gi, gj, rs, cs in group_slices(fmt, N, K):
        blk = w[rs, cs].double()
        if fmt.zero != "none":
            r = blk.max().clamp(min=0) - blk.min().clamp(max=0)
        else:
            r = blk.abs().max()
        ideal = torch.tensor([float(r) / span], dtype=torch.float64)
        # nearest value of the scale type (half an ulp, subnormals included), plus 2**-24 relative
        # for the float32 step the rounding goes through
        tol = float(half_ulp(ideal, st)) + float(ideal) * 2.0**-23
        assert abs(float(svals[gi, gj]) - float(ideal)) <= tol, (gi, gj)
    eff = effective_scale(q)
    w64 = w.double()
    rel_slack = torch.tensor(
        [float(half_ulp(torch.tensor([float(v)], dtype=torch.float64), st)) / float(v) for v in svals.flatten()],
        dtype=torch.float64,
    ).view_as(svals)
    excess = span * eff * per_element(rel_slack, fmt, N, K)
    err = (R.dequantize_weight(q).double() - w64).abs()
    bound = 0.5 * eff + excess + 4 * U32 * (w64.abs() + eff)
    assert bool((err <= bound).all()), float((err - bound).max())
    if fmt.zero == "int":
        # asymmetric ranges: the zero code is exactly 0, and a weight of 0 dequantizes to exactly 0
        w0 = w.clone()
        w0[:, 5] = 0.0
        q0 = R.quantize_weight(w0, fmt)
        assert torch.equal(R.dequantize_weight(q0)[:, 5], torch.zeros(N))


FP_BOUND_FORMATS = [
    "e2m1g32-sbf16",
    "e4m3gc-sf32",
    "e3m2g32-sf16",
    "e2m3g16-se4m3",
    "e5m2g128-sbf16",
    "e4m3g128n128-sf32",
    "e2m1g16-se4m3-gs",
    "e4m3",
]


@pytest.mark.parametrize("fmt", FP_BOUND_FORMATS)
def test_float_code_error_is_half_ulp(fmt):
    fmt = F.parse_weight_format(fmt)
    N, K = 33, 260
    w = torch.randn(N, K, generator=gen(3)) * torch.exp2(torch.randint(-8, 8, (N, 1), generator=gen(4)).float())
    q = R.quantize_weight(w, fmt)
    eff = effective_scale(q) if fmt.scale else torch.ones(N, K, dtype=torch.float64)
    x = w.double().abs() / eff
    cmax = fmt.code.max_value
    over = (x - cmax).clamp(min=0) * eff  # saturation beyond the largest code
    bound = half_ulp(x.clamp(max=cmax), fmt.code) * eff + over
    err = (R.dequantize_weight(q).double() - w.double()).abs()
    assert bool((err <= bound * (1 + 1e-6) + 4 * U32 * w.double().abs()).all())
    if fmt.scale is not None and str(fmt.scale) != "e8m0" and not fmt.global_scale:
        # scales are amax / code max, so only the rounding of the scale can push a value past the top
        assert float(over.max()) <= float((eff * cmax).max()) * 2.0 ** -(fmt.scale.man + 1)


# ---- exact round trips ----------------------------------------------------------------------------


def _random_scales(shape, st, g, top):
    """Random representable scales of type st with short mantissas, the first one forced to ``top``."""
    if str(st) == "e8m0":
        s = torch.randint(118, 132, shape, generator=g).to(torch.uint8)
        s.view(-1)[0] = 127
        return s
    v = torch.exp2(torch.rand(shape, generator=g) * 6 - 5)  # 2**-5 .. 2**1
    v = v.clamp(max=top)
    v.view(-1)[0] = top
    # bf16 rounding keeps mantissas short, so products with code values stay exact in float32
    return v.to(torch.bfloat16).to(R.torch_dtype(st))


def build_exact(fmt, N, K, seed):
    """A QuantizedWeight whose float weight requantizes to exactly the same codes and scales.

    Every group holds the largest code (and, with zero points, the code 0 as well), so the group's
    range over the code span equals the scale; symmetric integer codes avoid -2**(B-1).
    """
    fmt = F.parse_weight_format(fmt)
    g = gen(seed)
    code = fmt.code
    if code.is_int and fmt.zero == "none":
        # symmetric values -c..c with c = 2**(B-1) - 1 (c = 1 for B = 1, whose only nonzero is -1)
        c = max(2 ** (code.bits - 1) - 1, 1)
        values = torch.randint(-c, min(c, 2 ** (code.bits - 1) - 1) + 1, (N, K), generator=g)
        to_code = (
            (lambda v: v & ((1 << code.bits) - 1)) if code.kind == F.KIND_INT else (lambda v: v + 2 ** (code.bits - 1))
        )  # implied zero point
        codes = to_code(values)
        top_code = int(to_code(torch.tensor(-c)))
    elif code.is_int:
        codes = torch.randint(0, code.max_int + 1, (N, K), generator=g)
        top_code = code.max_int
    else:
        finite, _ = finite_code_values(code)
        pool = torch.tensor(finite)
        codes = pool[torch.randint(0, len(finite), (N, K), generator=g)]
        table = code.values()
        top_code = max(finite, key=lambda c: table[c])
    codes = codes.clone()
    if fmt.scale is None:
        return R.QuantizedWeight(fmt, codes.to(torch.uint8))
    ng = -(-N // fmt.group_n)
    kg = -(-K // (fmt.group_k or K))
    for gi, gj, rs, cs in group_slices(fmt, N, K):
        codes[rs.start, cs.start] = top_code
        if fmt.zero != "none":  # both ends of the code range in every group (groups have >= 8 inputs)
            codes[rs.stop - 1, cs.stop - 1] = 0
    st = fmt.scale
    top = 448.0 if (fmt.global_scale and str(st) == "e4m3") else 1.0
    scales = _random_scales((ng, kg), st, g, top)
    zeros = None
    if fmt.zero == "int":
        zeros = torch.randint(0, code.max_int + 1, (ng, kg), generator=g).to(torch.uint8)
    elif fmt.zero == "float":
        zf = torch.randint(0, 4 * code.max_int + 1, (ng, kg), generator=g).float() / 4  # quarter steps
        zeros = zf.to(R.torch_dtype(st))
    gscale = torch.tensor(0.75 * 2.0**-7) if fmt.global_scale else None
    return R.QuantizedWeight(fmt, codes.to(torch.uint8), scales, zeros, gscale)


EXACT_FORMATS = [
    "u4g128-sbf16",
    "u4g128-sf16-zi",
    "u4g128-sf16-zf",
    "i4g128-sf16",
    "i8gc-sf32",
    "u8g64-sbf16-zi",
    "e2m1g32-se8m0",
    "e2m1g16-se4m3-gs",
    "e2m1g32-sbf16-gs",
    "e4m3g128n128-sf32",
    "e3m2g32-se8m0",
    "e2m3g32-se8m0",
    "i4g32-se8m0",
    "u4g32-se8m0-zi",
    "u2g8-sf16",
    "i2g16-sbf16",
    "e5m2gc-sbf16",
    "e4m3",
    "u4g64n16-sbf16",
    "u1g8-sf32",
    "e4m3g32-se4m3",
    "u5g32-se4m3-zf",
]


@pytest.mark.parametrize("fmt", EXACT_FORMATS)
def test_exact_round_trip_from_codes_and_scales(fmt):
    q = build_exact(fmt, 40, 200, seed=len(fmt))  # 200 = 128 + a partial group of 72
    w = R.dequantize_weight(q)
    q2 = R.quantize_weight(w, q.fmt)
    assert torch.equal(q2.codes, q.codes)
    if q.scales is not None:
        assert q2.scales.dtype == q.scales.dtype
        assert torch.equal(
            q2.scales.view(torch.uint8) if q.scales.dtype.itemsize == 1 else q2.scales,
            q.scales.view(torch.uint8) if q.scales.dtype.itemsize == 1 else q.scales,
        )
    if q.zeros is not None:
        assert torch.equal(q2.zeros.float(), q.zeros.float())
    if q.global_scale is not None:
        assert float(q2.global_scale) == float(q.global_scale)
    assert torch.equal(R.dequantize_weight(q2), w)


# ---- named formats --------------------------------------------------------------------------------


def test_dequantize_definition_by_hand():
    fmt = F.parse_weight_format("u4g8-sf16-zi")
    codes = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 15, 9]], dtype=torch.uint8)
    scales = torch.tensor([[0.5, 2.0]], dtype=torch.float16)
    zeros = torch.tensor([[3, 8]], dtype=torch.uint8)
    q = R.QuantizedWeight(fmt, codes, scales, zeros)
    assert R.dequantize_weight(q).tolist() == [[-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 6.0, 2.0]]
    u4 = R.QuantizedWeight(
        "u4g8-sf16", torch.tensor([[0, 8, 15, 9]], dtype=torch.uint8), torch.tensor([[0.5]], dtype=torch.float16)
    )
    assert R.dequantize_weight(u4).tolist() == [[-4.0, 0.0, 3.5, 0.5]]  # implied zero 8
    assert R.implied_zero("u4g8-sf16") == 8 and R.implied_zero("u4g8-sf16-zi") == 0
    assert R.implied_zero("i4g8-sf16") == 0 and R.implied_zero("e2m1g32-se8m0") == 0
    nv = R.QuantizedWeight(
        "e2m1g16-se4m3-gs",
        torch.tensor([[7] * 16 + [9] * 16], dtype=torch.uint8),
        torch.tensor([[2.0, 0.25]]).to(torch.float8_e4m3fn),
        None,
        torch.tensor(0.5),
    )
    assert R.dequantize_weight(nv).tolist() == [[6.0] * 16 + [-0.0625] * 16]


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("gran_scale", ["g32-sbf16", "gc-sf32", "g16-se8m0", "g8n8-se4m3", "g32-sf16-gs"])
def test_unsigned_symmetric_is_signed_with_offset_encoding(bits, gran_scale):
    """uB without zero point holds the values of iB; only the bit encoding differs (code xor 2**(B-1))."""
    w = torch.randn(24, 80, generator=gen(bits)) * 0.1
    qu = R.quantize_weight(w, f"u{bits}{gran_scale}")
    qi = R.quantize_weight(w, f"i{bits}{gran_scale}")
    assert torch.equal(
        qu.scales.view(torch.uint8) if qu.scales.dtype.itemsize == 1 else qu.scales,
        qi.scales.view(torch.uint8) if qi.scales.dtype.itemsize == 1 else qi.scales,
    )
    assert torch.equal(qu.codes, qi.codes ^ (1 << (bits - 1)))
    assert torch.equal(R.dequantize_weight(qu), R.dequantize_weight(qi))


def test_mxfp4_scales_are_ocp_powers_of_two():
    N, K = 16, 256
    w = torch.randn(N, K, generator=gen(11)) * 3
    w[0, :32] = torch.tensor([5.0, 0.25, -1.25] + [0.0] * 29)  # a hand-checked group
    q = R.quantize_weight(w, "e2m1g32-se8m0")
    assert q.scales.dtype == torch.uint8 and q.scales.shape == (N, K // 32)
    vals = R.decode(q.codes, "e2m1")
    assert float(vals.abs().max()) <= 6.0
    for gi, gj, rs, cs in group_slices(q.fmt, N, K):
        amax = float(w[rs, cs].abs().max())
        # OCP MX: shared exponent floor(log2 amax) - emax_elem, emax of e2m1 = 2 (6 = 1.5 * 2**2)
        assert int(q.scales[gi, gj]) - 127 == math.floor(math.log2(amax)) - 2
    # amax 5 -> exponent 0, scale 1; 5 ties between 4 and 6 -> 4 (even mantissa); 0.25 -> 0; -1.25 -> -1
    assert int(q.scales[0, 0]) == 127
    assert vals[0, :3].tolist() == [4.0, 0.0, -1.0]


def test_nvfp4_two_level_scales():
    N, K = 8, 64
    w = torch.randn(N, K, generator=gen(12))
    w[2, 17] = 2688.0  # tensor amax = 448 * 6, so the global scale is exactly 1
    w[5, 32:48] = torch.linspace(-12, 12, 16)  # a group of amax 12: scale 12 / 6 = 2
    q = R.quantize_weight(w, "e2m1g16-se4m3-gs")
    assert q.global_scale.dtype == torch.float32 and q.global_scale.shape == ()
    assert float(q.global_scale) == 2688.0 / (448 * 6)
    assert q.scales.dtype == torch.float8_e4m3fn and q.scales.shape == (N, K // 16)
    assert float(q.scales[2, 1].float()) == 448.0
    assert float(q.scales[5, 2].float()) == 2.0
    assert R.dequantize_weight(q)[5, 32].item() == -12.0
    # a general tensor: global = amax / (448 * 6) in float32, the largest group scale is 448
    w2 = torch.randn(24, 96, generator=gen(13)) * 0.02
    q2 = R.quantize_weight(w2, "e2m1g16-se4m3-gs")
    assert float(q2.global_scale) == float(torch.tensor(float(w2.abs().max()) / (448 * 6), dtype=torch.float32))
    assert float(q2.scales.float().max()) == 448.0
    # each group scale is its amax / 6 / global rounded to e4m3: within half an e4m3 ulp (2**-4 relative)
    amax = w2.abs().view(24, 6, 16).amax(-1).double()
    ideal = amax / 6 / float(q2.global_scale)
    assert bool(((q2.scales.double() - ideal).abs() <= ideal * 2.0**-4 + 2.0**-10).all())


def test_block_scales_128x128():
    N, K = 300, 260
    w = torch.randn(N, K, generator=gen(14))
    q = R.quantize_weight(w, "e4m3g128n128-sf32")
    assert q.scales.shape == (3, 3) and q.scales.dtype == torch.float32
    for gi, gj, rs, cs in group_slices(q.fmt, N, K):
        want = torch.tensor(float(w[rs, cs].abs().max()) / 448, dtype=torch.float32)
        assert float(q.scales[gi, gj]) == float(want)
    # changing one element moves only its own tile's scale
    w2 = w.clone()
    w2[200, 150] = 1000.0
    q2 = R.quantize_weight(w2, "e4m3g128n128-sf32")
    changed = (q2.scales != q.scales).nonzero().tolist()
    assert changed == [[1, 1]]


def test_partial_groups_and_per_channel():
    N, K = 5, 40
    w = torch.randn(N, K, generator=gen(15))
    q = R.quantize_weight(w, "i4g32-sf32")
    assert q.scales.shape == (5, 2)
    for n in range(N):
        # the partial second group covers inputs 32..39 only
        assert float(q.scales[n, 1]) == float(torch.tensor(float(w[n, 32:].abs().max()) / 7, dtype=torch.float32))
    qc = R.quantize_weight(w, "i8gc-sbf16")
    assert qc.scales.shape == (5, 1)
    want = (w.abs().amax(dim=1, keepdim=True) / 127).to(torch.bfloat16)
    assert torch.equal(qc.scales, want)


def test_zero_point_asymmetric_ranges():
    N, K = 6, 64
    g = gen(16)
    w = torch.rand(N, K, generator=g) * 3.0 - 0.3  # [-0.3, 2.7): mostly positive
    w[1] = torch.rand(K, generator=g) + 1.0  # all positive: the range still starts at 0
    w[2] = -torch.rand(K, generator=g) - 1.0  # all negative: the range ends at 0
    q = R.quantize_weight(w, "u4gc-sf32-zi")
    s = q.scales.double().squeeze(1)
    z = q.zeros.double().squeeze(1)
    dq = R.dequantize_weight(q).double()
    for n in range(N):
        lo = min(float(w[n].min()), 0.0)
        hi = max(float(w[n].max()), 0.0)
        assert abs(s[n] - (hi - lo) / 15) <= (hi - lo) / 15 * 2.0**-23
        assert abs(float(dq[n].min()) - float(w[n].min())) <= s[n] / 2 * 1.0001
        assert abs(float(dq[n].max()) - float(w[n].max())) <= s[n] / 2 * 1.0001
    assert z[1] == 0 and z[2] == 15
    # symmetric i4 of the same mostly-positive data wastes half of its codes: larger steps
    qs = R.quantize_weight(w, "i4gc-sf32")
    assert bool((qs.scales.double().squeeze(1)[[0, 1]] > s[[0, 1]]).all())
    # float zero points: the zero is -min / scale rounded to the scale type, not an integer
    qf = R.quantize_weight(w, "u4gc-sbf16-zf")
    zf = qf.zeros.double().squeeze(1)
    sf = qf.scales.double().squeeze(1)
    want = -float(w[0].min()) / sf[0]
    assert abs(zf[0] - want) <= want * 2.0**-8  # bf16 rounding
    assert zf[0] != round(float(zf[0])) or abs(want - round(want)) < want * 2.0**-8
    assert zf[1] == 0


def test_all_zero_tiny_and_huge_weights():
    for fmt in (
        "u4g32-sf16",
        "i4g32-sbf16",
        "e2m1g32-se8m0",
        "e2m1g16-se4m3-gs",
        "u4g32-sf16-zi",
        "u4g32-se4m3-zf",
        "e4m3gc-sf16",
    ):
        q = R.quantize_weight(torch.zeros(4, 64), fmt)
        assert bool((R.scale_value(q.scales, q.fmt) == 1).all()), fmt  # scale 1, never 0 or NaN
        assert torch.equal(R.dequantize_weight(q), torch.zeros(4, 64))
        if q.global_scale is not None:
            assert float(q.global_scale) == 1.0
    # f16 scales: a tiny group gets the smallest f16 subnormal instead of 0; a huge one saturates
    w = torch.full((2, 32), 1e-12)
    w[1] = 1e9
    q = R.quantize_weight(w, "i4g32-sf16")
    assert q.scales[:, 0].float().tolist() == [2.0**-24, 65504.0]
    dq = R.dequantize_weight(q)
    assert bool(torch.isfinite(dq).all()) and float(dq[1, 0]) == 7 * 65504.0
    # e8m0: far below 2**-127 clamps to the smallest byte rather than wrapping
    q8 = R.quantize_weight(torch.full((1, 32), 1e-45), "e2m1g32-se8m0")
    assert int(q8.scales[0, 0]) == 0


def test_quantize_weight_errors():
    with pytest.raises(ValueError, match=r"2-D \[N, K\], got shape \[8\]"):
        R.quantize_weight(torch.randn(8), "u4g8-sf16")
    with pytest.raises(ValueError, match="2-D"):
        R.quantize_weight(torch.randn(2, 8, 8), "u4g8-sf16")
    with pytest.raises(TypeError, match="floating point dtype, got torch.int32"):
        R.quantize_weight(torch.ones(8, 8, dtype=torch.int32), "u4g8-sf16")
    with pytest.raises(TypeError, match="torch.Tensor"):
        R.quantize_weight([[1.0]], "u4g8-sf16")
    with pytest.raises(ValueError, match="NaN or infinite"):
        R.quantize_weight(torch.tensor([[1.0, math.nan]]), "e4m3")
    with pytest.raises(ValueError, match="is empty"):
        R.quantize_weight(torch.zeros(0, 8), "e4m3")
    with pytest.raises(F.FormatError, match="cannot parse weight format"):
        R.quantize_weight(torch.randn(8, 8), "u4-g8")


def test_quantized_weight_validation():
    fmt = "u4g8-sf16-zi"
    codes = torch.zeros(4, 16, dtype=torch.uint8)
    s = torch.ones(4, 2, dtype=torch.float16)
    z = torch.zeros(4, 2, dtype=torch.uint8)
    R.QuantizedWeight(fmt, codes, s, z)
    with pytest.raises(ValueError, match=r"must have shape \[4, 2\] and dtype torch.float16, got shape \[4, 1\]"):
        R.QuantizedWeight(fmt, codes, s[:, :1], z)
    with pytest.raises(ValueError, match="got shape .* and dtype torch.float32"):
        R.QuantizedWeight(fmt, codes, s.float(), z)
    with pytest.raises(ValueError, match="needs zeros of shape"):
        R.QuantizedWeight(fmt, codes, s, None)
    with pytest.raises(ValueError, match=r"zeros of format .* dtype torch.uint8"):
        R.QuantizedWeight(fmt, codes, s, z.float())
    with pytest.raises(ValueError, match="needs scales"):
        R.QuantizedWeight(fmt, codes, None, z)
    with pytest.raises(ValueError, match="code 16 does not fit in the 4 bits of u4"):
        R.QuantizedWeight(fmt, codes + 16, s, z)
    with pytest.raises(ValueError, match="zero point 16 is outside the code range 0..15"):
        R.QuantizedWeight(fmt, codes, s, z + 16)
    with pytest.raises(TypeError, match="dtype torch.uint8"):
        R.QuantizedWeight(fmt, codes.int(), s, z)
    with pytest.raises(ValueError, match=r"2-D \[N, K\] uint8"):
        R.QuantizedWeight(fmt, codes[0], s, z)
    with pytest.raises(ValueError, match="has no zero point, but zeros were given"):
        R.QuantizedWeight("u4g8-sf16", codes, s, z)
    with pytest.raises(ValueError, match="needs global_scale as a float32 scalar"):
        R.QuantizedWeight("e2m1g8-se4m3-gs", codes, s.to(torch.float8_e4m3fn), None, torch.tensor([1.0]))
    with pytest.raises(ValueError, match="has no global scale"):
        R.QuantizedWeight("u4g8-sf16", codes, s, None, torch.tensor(1.0))
    with pytest.raises(ValueError, match="has no scales, but scales was given"):
        R.QuantizedWeight("e4m3", codes, s)
    with pytest.raises(TypeError, match="takes a QuantizedWeight"):
        R.dequantize_weight(codes)


# ---- activations ----------------------------------------------------------------------------------


@pytest.mark.parametrize("afmt", ["e4m3-pt", "e5m2-pt", "i8-pt", "e4m3-g32", "i8-g16", "e5m2-g64"])
def test_activation_quantization(afmt):
    a = F.parse_activation_format(afmt)
    M, K = 7, 100  # 100 leaves a partial last group for every group size here
    x = torch.randn(M, K, generator=gen(21)) * torch.exp2(torch.randint(-5, 5, (M, 1), generator=gen(22)).float())
    x[4] = 0.0
    codes, scales = R.quantize_activation(x, a)
    t = str(a.type)
    tmax = {"e4m3": 448.0, "e5m2": 57344.0, "i8": 127.0}[t]
    assert codes.dtype == R.torch_dtype(a.type) and codes.shape == (M, K)
    g = K if a.granularity == "token" else a.group_k
    ng = -(-K // g)
    assert scales.dtype == torch.float32 and scales.shape == (M, ng)
    for m in range(M):
        for j in range(ng):
            amax = float(x[m, j * g : (j + 1) * g].abs().max())
            want = 1.0 if amax == 0 else float(torch.tensor(amax, dtype=torch.float32) / tmax)
            assert float(scales[m, j]) == want, (m, j)
    s = scales[:, torch.arange(K) // g].double()
    deq = codes.double() * s
    assert torch.equal(R.dequantize_activation(codes, scales, a).double(), deq.float().double())
    assert float(codes.double().abs().max()) <= tmax
    err = (deq - x.double()).abs()
    xs = x.double().abs() / s
    if t == "i8":
        bound = 0.5 * s
    else:
        bound = half_ulp(xs, a.type) * s
    assert bool((err <= bound * (1 + 1e-6) + 4 * U32 * x.double().abs()).all())
    assert torch.equal(deq[4], torch.zeros(K, dtype=torch.float64))


def test_activation_unquantized_and_errors():
    x = torch.randn(3, 16)
    c, s = R.quantize_activation(x, "bf16")
    assert c.dtype == torch.bfloat16 and s is None and torch.equal(c, x.to(torch.bfloat16))
    assert torch.equal(R.dequantize_activation(c, None, "bf16"), c.float())
    c16, _ = R.quantize_activation(x, "f16")
    assert c16.dtype == torch.float16
    with pytest.raises(ValueError, match=r"2-D \[M, K\]"):
        R.quantize_activation(torch.randn(16), "e4m3-pt")
    with pytest.raises(TypeError, match="floating point dtype"):
        R.quantize_activation(torch.ones(2, 16, dtype=torch.int8), "i8-pt")
    with pytest.raises(F.FormatError, match="need scales"):
        R.quantize_activation(x, "e4m3")
    codes, scales = R.quantize_activation(x, "e4m3-pt")
    with pytest.raises(ValueError, match=r"needs float32 scales of shape \[3, 1\]"):
        R.dequantize_activation(codes, None, "e4m3-pt")
    with pytest.raises(ValueError, match=r"float32 of shape \[3, 1\], got torch.float32 of shape \[3, 2\]"):
        R.dequantize_activation(codes, torch.ones(3, 2), "e4m3-pt")
    with pytest.raises(TypeError, match="must be stored as torch.float8_e4m3fn, got torch.float32"):
        R.dequantize_activation(x, scales, "e4m3-pt")
    with pytest.raises(ValueError, match="not quantized and takes no scales"):
        R.dequantize_activation(c, scales, "bf16")


# ---- GEMM -----------------------------------------------------------------------------------------


def _gemm_tolerance(a64, w64, K):
    # Standard bound of a float32 dot product of length K: |err| <= K * u * sum |a| |w| (plus the
    # final rounding), computed from the float64 operands.
    return (K + 2) * U32 * (a64.abs() @ w64.abs().T)


@pytest.mark.parametrize(
    "fmt", ["u4g128-sbf16", "e2m1g32-se8m0", "u4g64-sf16-zi", "e2m1g16-se4m3-gs", "e4m3g128n128-sf32"]
)
def test_gemm_matches_float64_matmul(fmt):
    M, N, K = 9, 48, 320
    w = torch.randn(N, K, generator=gen(31))
    q = R.quantize_weight(w, fmt)
    a = torch.randn(M, K, generator=gen(32)).to(torch.bfloat16)
    out = R.gemm(a, q, "bf16", out_dtype=torch.float32)
    assert out.dtype == torch.float32 and out.shape == (M, N)
    a64 = a.double()
    # dequantized operands, recomputed here from the definition in float64
    w64 = (R.decode(q.codes, q.fmt.code).double() - zero_points(q)) * effective_scale(q)
    ref = a64 @ w64.T
    assert bool(((out.double() - ref).abs() <= _gemm_tolerance(a64, w64, K) + 1e-30).all())
    # bias, and a bf16 output within one bf16 rounding of the float32 result
    bias = torch.randn(N, generator=gen(33)).to(torch.bfloat16)
    outb = R.gemm(a, q, "bf16", out_dtype=torch.bfloat16, bias=bias)
    assert outb.dtype == torch.bfloat16
    refb = ref + bias.double()
    tol = _gemm_tolerance(a64, w64, K) + refb.abs() * 2.0**-8
    assert bool(((outb.double() - refb).abs() <= tol).all())


@pytest.mark.parametrize("afmt", ["e4m3-pt", "i8-pt", "e4m3-g32", "e5m2-g64", "f16"])
def test_gemm_quantized_activations(afmt):
    M, N, K = 5, 24, 192
    q = R.quantize_weight(torch.randn(N, K, generator=gen(41)), "u4g64-sf16-zi")
    x = torch.randn(M, K, generator=gen(42))
    codes, scales = R.quantize_activation(x, afmt)
    out = R.gemm(codes, q, afmt, a_scales=scales, out_dtype="f32")
    a = F.parse_activation_format(afmt)
    if scales is None:
        a64 = codes.double()
    else:
        g = K if a.granularity == "token" else a.group_k
        a64 = codes.double() * scales[:, torch.arange(K) // g].double()
    w64 = (R.decode(q.codes, "u4").double() - zero_points(q)) * effective_scale(q)
    ref = a64 @ w64.T
    assert bool(((out.double() - ref).abs() <= _gemm_tolerance(a64, w64, K)).all())
    # and the quantized GEMM tracks the float one within the activation quantization error
    full = x.double() @ w64.T
    assert float((out.double() - full).abs().max()) < 0.1 * float(full.abs().max())


def test_gemm_errors():
    q = R.quantize_weight(torch.randn(8, 64, generator=gen(51)), "u4g32-sbf16")
    a = torch.randn(2, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match="activations have K = 32 but the weight has K = 64"):
        R.gemm(a[:, :32], q)
    with pytest.raises(TypeError, match="must be stored as torch.bfloat16, got torch.float32"):
        R.gemm(a.float(), q)
    with pytest.raises(ValueError, match=r"needs float32 scales of shape \[2, 1\]"):
        R.gemm(R.quantize_activation(a.float(), "e4m3-pt")[0], q, "e4m3-pt")
    with pytest.raises(TypeError, match="out_dtype torch.int32 is not accepted"):
        R.gemm(a, q, out_dtype=torch.int32)
    with pytest.raises(F.FormatError, match="output type e4m3 is not accepted"):
        R.gemm(a, q, out_dtype="e4m3")
    with pytest.raises(ValueError, match=r"bias must be a floating point tensor of shape \[8\]"):
        R.gemm(a, q, bias=torch.zeros(7))
    with pytest.raises(TypeError, match="must be a QuantizedWeight"):
        R.gemm(a, torch.zeros(8, 64))
    with pytest.raises(F.FormatError, match="cannot parse activation format"):
        R.gemm(a, q, "bf-16")
