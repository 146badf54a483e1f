"""torch.ops.humming on the CPU: packing, the reference GEMM reading the packed layout, activation
quantization, opcheck, and every error path of the ops."""

from __future__ import annotations

import pytest
import torch

import humming_aot as ha
from humming_aot import formats as F
from humming_aot import reference as R
from humming_aot.testing import assert_gemm_close

WEIGHT_FORMATS = [
    "u4g128-sbf16",
    "u4g128-sbf16-zi",
    "u4g64-sbf16-zf",
    "i4g128-sbf16",
    "u8gc-sbf16",
    "i8gc-sf32",
    "u3g32-sbf16",
    "u5g32-sf16-zi",
    "i2g64-sbf16",
    "u1g32-sbf16-zi",
    "i7gc-sbf16",
    "e2m1g32-se8m0",
    "e2m1g32-sbf16",
    "e2m1g16-se4m3-gs",
    "e4m3g128n128-sf32",
    "e3m2g32-sbf16",
    "e2m3g32-sf16",
    "e5m2gc-sf32",
    "e4m3",
    "e5m2",
]


def _weight(n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * 0.05


def _bits_reference(codes: torch.Tensor, bits: int, k_pad: int, n_pad: int) -> torch.Tensor:
    """The generic layout written out with Python integers: row r is the little-endian bit stream of
    its codes, k_pad codes long, cut into 32-bit words."""
    n, k = codes.shape
    words = k_pad * bits // 32
    out = torch.zeros(n_pad, words, dtype=torch.int64)
    for r in range(n):
        stream = 0
        for c in range(k):
            stream |= int(codes[r, c]) << (c * bits)
        for w in range(words):
            out[r, w] = (stream >> (32 * w)) & 0xFFFFFFFF
    return out


@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_matches_bit_stream_definition(bits):
    n, k = 11, 70  # both need padding
    g = torch.Generator().manual_seed(bits)
    codes = torch.randint(0, 1 << bits, (n, k), generator=g, dtype=torch.int64).to(torch.uint8)
    fmt = f"u{bits}g32-sbf16"
    scales = torch.rand(n, 3, generator=g).to(torch.bfloat16)
    p = ha.pack_weight(codes, scales, None, None, fmt)
    assert (p.n, p.k) == (n, k)
    assert p.k_pad % 32 == 0 and p.k_pad >= k and p.n_pad % 8 == 0 and p.n_pad >= n
    expect = _bits_reference(codes, bits, p.k_pad, p.n_pad)
    got = p.codes.to(torch.int64) & 0xFFFFFFFF
    assert torch.equal(got, expect)
    # scales are stored K-group major and padded with zeros
    assert torch.equal(p.scales[:3, :n], scales.T)
    assert bool((p.scales[:, n:] == 0).all())


def _layouts(fmt):
    bits = F.parse_weight_format(fmt).code.bits
    return ["generic", "sm80", "sm90"] + (["sm90a8"] if bits == 4 else []) if bits in (4, 8) else ["generic"]


LAYOUT_CASES = [(f, lay) for f in WEIGHT_FORMATS for lay in _layouts(f)]


def _sm80_position(n, k, bits, k_blocks):
    """Word and bit of code (n, k) in the sm80 layout, written out from its definition: 16 x 64
    blocks stored block-column by block-column; lane = 4 * (n % 8) + (k % 8) // 2 owns
    `bits` words (32 codes); pair P = 2 * ((n % 64) // 8) + (k % 16) // 8 sits in word P // (16 / bits) at
    position P % (16 / bits), its second element (odd k) a half word higher."""
    ppw = 16 // bits
    lane = 4 * (n % 8) + (k % 8) // 2
    pair = 2 * ((n % 64) // 8) + (k % 16) // 8
    block = (n // 64) * k_blocks + k // 16
    word = block * 32 * bits + lane * bits + pair // ppw
    return word, bits * (pair % ppw + (k % 2) * ppw)


@pytest.mark.parametrize("bits", [4, 8])
def test_sm80_layout_matches_its_definition(bits):
    n, k = 70, 100
    g = torch.Generator().manual_seed(bits)
    codes = torch.randint(0, 1 << bits, (n, k), generator=g, dtype=torch.int64).to(torch.uint8)
    p = ha.pack_weight(codes, torch.ones(n, 1, dtype=torch.bfloat16), None, None, f"u{bits}gc-sbf16", layout="sm80")
    assert (p.n_pad, p.k_pad) == (128, 128)
    words = (p.codes.reshape(-1).to(torch.int64) & 0xFFFFFFFF).tolist()
    expect = [0] * len(words)
    for r in range(n):
        for c in range(k):
            w, b = _sm80_position(r, c, bits, p.k_pad // 16)
            expect[w] |= int(codes[r, c]) << b
    assert words == expect


def _sm90_position(n, k, bits, n_blocks):
    """Word and bit of code (n, k) in the sm90 layout, written out from its definition: 64 x 64
    blocks stored K-block major; thread t = 32 * w + 4 * (n % 8) + (k % 8) // 2 of the warpgroup,
    w = (n % 64) // 16, owns `bits` words; pair P = 4 * ((k % 64) // 16) + 2 * ((k % 16) // 8) +
    (n % 16) // 8 sits in word j = P // (16 / bits) at position P % (16 / bits), its second element
    (odd k) a half word higher; word j of thread t is word 512 * (j // 4) + 4 * t + j % 4 of the block."""
    ppw = 16 // bits
    t = 32 * ((n % 64) // 16) + 4 * (n % 8) + (k % 8) // 2
    pair = 4 * ((k % 64) // 16) + 2 * ((k % 16) // 8) + (n % 16) // 8
    j = pair // ppw
    block = (k // 64) * n_blocks + n // 64
    word = block * 128 * bits + 512 * (j // 4) + 4 * t + j % 4
    return word, bits * (pair % ppw + (k % 2) * ppw)


def _sm90_fp4_bits(bit):
    """Where the e2m1 code that _sm90_position puts at `bit` (4 x its slot) spreads its mantissa,
    exponent and sign bits instead, from layout 3's definition for e2m1: slot 4 h + p (pair p, element
    h) owns byte j = 2 (p % 2) + h; pairs 0 and 1 keep those bits at 6, 7, 1 and 8 of the byte, pairs 2
    and 3 at 2, 3, 5 and 12 (past the byte: the word wraps)."""
    h, p = divmod(bit // 4, 4)
    offsets = (6, 7, 1, 8) if p < 2 else (2, 3, 5, 12)
    return [(8 * (2 * (p % 2) + h) + o) % 32 for o in offsets]


@pytest.mark.parametrize("fmt", ["u4gc-sbf16", "u8gc-sbf16", "e2m1gc-sbf16"])
def test_sm90_layout_matches_its_definition(fmt):
    bits = F.parse_weight_format(fmt).code.bits
    n, k = 70, 100
    g = torch.Generator().manual_seed(bits + 1)
    codes = torch.randint(0, 1 << bits, (n, k), generator=g, dtype=torch.int64).to(torch.uint8)
    p = ha.pack_weight(codes, torch.ones(n, 1, dtype=torch.bfloat16), None, None, fmt, layout="sm90")
    assert (p.n_pad, p.k_pad, p.layout) == (128, 128, 3)
    words = (p.codes.reshape(-1).to(torch.int64) & 0xFFFFFFFF).tolist()
    expect = [0] * len(words)
    for r in range(n):
        for c in range(k):
            w, b = _sm90_position(r, c, bits, p.n_pad // 64)
            if fmt.startswith("e2m1"):
                for i, pos in enumerate(_sm90_fp4_bits(b)):
                    expect[w] |= ((int(codes[r, c]) >> i) & 1) << pos
            else:
                expect[w] |= int(codes[r, c]) << b
    assert words == expect


def _sm90a8_position(n, k, n_pad):
    """Word and bit of code (n, k) in the sm90a8 layout, written out from its definition: the
    128-input chunks of the channels, 16 words each, K tile by K tile (chunk c of channel n is the
    (c * n_pad + n)-th); inside chunk c, input 32 s + 16 h + 4 q + j sits in word 4 q + s at
    nibble 4 h + j."""
    c, kk = divmod(k, 128)
    s, r = divmod(kk, 32)
    h, r = divmod(r, 16)
    q, j = divmod(r, 4)
    return 16 * (c * n_pad + n) + 4 * q + s, 4 * (4 * h + j)


def _sm90a8_e2m1_bits(nibble):
    """The word bits of the e2m1 code at `nibble` (0..7) of an sm90a8 word, mantissa first: nibbles
    0..3 at their operand bits (byte j: mantissa 2, exponent 3 and 4, sign 7), nibbles 4..7 where a
    left rotation by 4 (mantissa, high exponent bit) or by 2 (low exponent bit, sign) puts them."""
    byte, operand = nibble % 4, (2, 3, 4, 7)
    if nibble < 4:
        return [8 * byte + b for b in operand]
    return [(8 * byte + b - rot) % 32 for b, rot in zip(operand, (4, 2, 4, 2), strict=True)]


def test_sm90a8_layout_matches_its_definition():
    n, k = 70, 300
    g = torch.Generator().manual_seed(9)
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.int64).to(torch.uint8)
    p = ha.pack_weight(codes, torch.ones(n, 1, dtype=torch.bfloat16), None, None, "e2m1gc-sbf16", layout="sm90a8")
    assert (p.n_pad, p.k_pad, p.layout, p.layout_name) == (72, 384, 4, "sm90a8")
    assert tuple(p.codes.shape) == (72, 384 // 8)  # the generic layout's extent, chunks K tile by K tile
    words = (p.codes.reshape(-1).to(torch.int64) & 0xFFFFFFFF).tolist()
    expect = [0] * len(words)
    for r in range(n):
        for c in range(k):
            w, b = _sm90a8_position(r, c, p.n_pad)
            # e2m1 codes spread their bits over the word (layout/sm90_a8.h fp4_order)
            for i, bit in enumerate(_sm90a8_e2m1_bits(b // 4)):
                expect[w] |= ((int(codes[r, c]) >> i) & 1) << bit
    assert words == expect
    u = ha.pack_weight(codes, torch.ones(n, 1, dtype=torch.bfloat16), None, None, "u4gc-sbf16", layout="sm90a8")
    expect = [0] * len(words)
    for r in range(n):
        for c in range(k):
            w, b = _sm90a8_position(r, c, p.n_pad)
            expect[w] |= int(codes[r, c]) << b
    assert (u.codes.reshape(-1).to(torch.int64) & 0xFFFFFFFF).tolist() == expect  # u4: a nibble each
    # Lane quad q's 16-byte unit of a chunk holds exactly the inputs of its A fragments.
    for q in range(4):
        want = sorted(32 * s + 16 * h + 4 * q + j for s in range(4) for h in range(2) for j in range(4))
        got = sorted(kk for kk in range(128) if _sm90a8_position(0, kk, 72)[0] // 4 == q)
        assert got == want
    with pytest.raises(ValueError, match="layout 4 \\(sm90a8\\) holds 4-bit codes"):
        ha.pack_weight(codes, torch.ones(n, 1, dtype=torch.bfloat16), None, None, "u8gc-sbf16", layout="sm90a8")


@pytest.mark.parametrize("fmt,layout", LAYOUT_CASES)
def test_unpack_is_exact_inverse(fmt, layout):
    n, k = 72, 256 + 64
    q = R.quantize_weight(_weight(n, k), fmt)
    p = ha.pack_weight(q, layout=layout)
    back = ha.unpack_weight(p)
    assert torch.equal(back.codes, q.codes)
    for a, b in ((back.scales, q.scales), (back.zeros, q.zeros), (back.global_scale, q.global_scale)):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("fmt,layout", LAYOUT_CASES)
def test_cpu_gemm_matches_reference(fmt, layout):
    w_fmt = F.parse_weight_format(fmt)
    n, k, m = 40, 200, 5  # n and k need padding; k is not a multiple of 128
    if w_fmt.group_k and k % w_fmt.group_k and w_fmt.group_n > 1:
        k = 256
    q = R.quantize_weight(_weight(n, k, 1), w_fmt)
    p = ha.pack_weight(q, layout=layout)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    bias = torch.randn(n).to(torch.bfloat16)
    fmt_g = F.GemmFormat("bf16", w_fmt, "bf16")
    out = ha.gemm(x, p, fmt_g, bias=bias)
    w = R.dequantize_weight(q)
    ref = x.double() @ w.double().T + bias.double()
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert_gemm_close(out, ref, x.float(), w, fmt)


@pytest.mark.parametrize("act", ["e4m3-pt", "e4m3-g64", "e5m2-pt", "i8-pt", "i8-g32"])
def test_quantize_act_matches_reference_bitwise(act):
    x = torch.randn(7, 192, generator=torch.Generator().manual_seed(3)) * 3
    x[2] = 0  # an all-zero token gets scale 1
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        codes, scales = ha.quantize_act(x.to(dt), act)
        rc, rs = R.quantize_activation(x.to(dt), act)
        assert codes.dtype == rc.dtype and scales.dtype == torch.float32
        assert torch.equal(scales, rs.float())
        assert torch.equal(codes.view(torch.uint8), rc.view(torch.uint8)), (act, dt)
        assert float(scales[2].max()) == 1.0


@pytest.mark.parametrize("act", ["e4m3-pt", "e4m3-g128", "e5m2-pt"])
def test_quantize_act_of_values_far_past_448_saturates_nowhere(act):
    """Activations far beyond e4m3's 448 (and e5m2's 57344) and far below 1 quantize without an
    infinity or NaN code: each scale maps its row's (or group's) largest magnitude to the largest
    finite code exactly, and every code dequantizes to within the 8-bit type's rounding."""
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(21))
    x[0] *= 1e6
    x[1] *= 1e-6
    x[2, 7] = -3.0e4  # one outlier in a row of small values
    codes, scales = ha.quantize_act(x, act)
    b = codes.view(torch.uint8)
    top = 0x7E if act.startswith("e4m3") else 0x7B  # the largest finite magnitude's code
    assert ((b & 0x7F) <= top).all(), "no infinity or NaN code"
    fa = F.parse_activation_format(act)
    deq = R.dequantize_activation(codes, scales, fa)
    group = x.shape[1] if fa.group_k in (0, None) or act.endswith("-pt") else fa.group_k
    for r in range(x.shape[0]):
        for g0 in range(0, x.shape[1], group):
            seg = x[r, g0 : g0 + group]
            i = int(seg.abs().argmax())
            assert int(b[r, g0 + i]) & 0x7F == top, (r, g0)
    rel = 2.0**-3 if act.startswith("e4m3") else 2.0**-2  # half an ulp of the code, relative
    err = (deq - x).abs()
    bound = rel * x.abs() + scales.repeat_interleave(group, dim=1)[:, : x.shape[1]] * (
        2.0**-9 if act.startswith("e4m3") else 2.0**-16
    )
    assert (err <= bound).all()


@pytest.mark.parametrize(
    "act,wfmt", [("e4m3-pt", "e4m3gc-sf32"), ("i8-pt", "i4g64-sbf16"), ("e4m3-g64", "u4g64-sbf16")]
)
def test_cpu_gemm_quantized_activations(act, wfmt):
    n, k, m = 24, 128, 6
    q = R.quantize_weight(_weight(n, k, 4), wfmt)
    p = ha.pack_weight(q)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(5))
    a, s = ha.quantize_act(x, act)
    out = ha.gemm(a, p, f"a-{act}_w-{wfmt}_c-f32", a_scales=s)
    a_deq = R.dequantize_activation(a, s, act)
    w = R.dequantize_weight(q)
    assert_gemm_close(out, a_deq.double() @ w.double().T, a_deq, w, f"{act} x {wfmt}")


def _packed(fmt="u4g64-sbf16-zi", n=16, k=128):
    return R.quantize_weight(_weight(n, k, 6), fmt), ha.pack_weight(R.quantize_weight(_weight(n, k, 6), fmt))


def test_opcheck_cpu():
    q, p = _packed()
    x = torch.randn(3, 128).to(torch.bfloat16)
    fmt = "a-bf16_w-u4g64-sbf16-zi_c-bf16"
    torch.library.opcheck(
        torch.ops.humming.gemm, (x, p.codes, p.scales, p.zeros, None, None, None, fmt, 1, 16, 128, "")
    )
    torch.library.opcheck(torch.ops.humming.pack_weight, (q.codes, q.scales, q.zeros, "u4g64-sbf16-zi", 1))
    torch.library.opcheck(torch.ops.humming.unpack_weight, (p.codes, p.scales, p.zeros, "u4g64-sbf16-zi", 1, 16, 128))
    torch.library.opcheck(torch.ops.humming.quantize_act, (torch.randn(4, 64), "e4m3-g32"))


def _gemm(x, p, fmt="a-bf16_w-u4g64-sbf16-zi_c-bf16", **kw):
    args = dict(
        codes=p.codes,
        scales=p.scales,
        zeros=p.zeros,
        global_scale=None,
        a_scales=None,
        bias=None,
        n=p.n,
        k=p.k,
        layout=1,
        instance="",
    )
    args.update(kw)
    return torch.ops.humming.gemm(
        x,
        args["codes"],
        args["scales"],
        args["zeros"],
        args["global_scale"],
        args["a_scales"],
        args["bias"],
        fmt,
        args["layout"],
        args["n"],
        args["k"],
        args["instance"],
    )


def test_gemm_error_paths():
    _, p = _packed()
    x = torch.randn(3, 128).to(torch.bfloat16)
    with pytest.raises(ValueError, match="activations must have dtype"):
        _gemm(x.float(), p)
    with pytest.raises(ValueError, match="columns but the weight has k=128"):
        _gemm(x[:, :64], p)
    with pytest.raises(ValueError, match="must be 2-D"):
        _gemm(x[None], p)
    with pytest.raises(ValueError, match="unit stride"):
        _gemm(torch.randn(128, 3).to(torch.bfloat16).T, p)
    with pytest.raises(ValueError, match="packed codes has shape"):
        _gemm(x, p, codes=p.codes[:8])
    with pytest.raises(ValueError, match="needs scales"):
        _gemm(x, p, scales=None)
    with pytest.raises(ValueError, match="needs zero points"):
        _gemm(x, p, zeros=None)
    with pytest.raises(ValueError, match="takes no zero points"):
        _gemm(x, p, fmt="a-bf16_w-u4g64-sbf16_c-bf16")
    with pytest.raises(ValueError, match="takes no global scale"):
        _gemm(x, p, global_scale=torch.ones(1))
    with pytest.raises(ValueError, match="scales must have dtype"):
        _gemm(x, p, scales=p.scales.float())
    with pytest.raises(ValueError, match="needs activation scales"):
        _gemm(x.to(torch.float8_e4m3fn), p, fmt="a-e4m3-pt_w-u4g64-sbf16-zi_c-bf16")
    with pytest.raises(ValueError, match=r"activation scales has shape \[3, 1\]; expected \[3, 2\]"):
        _gemm(x.to(torch.float8_e4m3fn), p, fmt="a-e4m3-g64_w-u4g64-sbf16-zi_c-bf16", a_scales=torch.ones(3, 1))
    with pytest.raises(ValueError, match="bias has shape"):
        _gemm(x, p, bias=torch.zeros(15, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="unknown weight layout id 7"):
        _gemm(x, p, layout=7)
    with pytest.raises(ValueError, match="no compiled instance is named 'nope'"):
        _gemm(x, p, instance="nope")
    with pytest.raises(ValueError, match="cannot parse GEMM format"):
        _gemm(x, p, fmt="bf16 x u4")
    with pytest.raises(ValueError, match="zero points are for unsigned integer codes"):
        _gemm(x, p, fmt="a-bf16_w-i4g64-sbf16-zi_c-bf16")
    # a weight packed for another format (4-bit codes read as 8-bit): the packed shape gives it away
    with pytest.raises(ValueError, match="packed codes has shape"):
        _gemm(x, p, fmt="a-bf16_w-u8g64-sbf16-zi_c-bf16")


def test_pack_error_paths():
    q, _ = _packed()
    with pytest.raises(ValueError, match="codes must be uint8"):
        torch.ops.humming.pack_weight(q.codes.int(), q.scales, q.zeros, "u4g64-sbf16-zi", 1)
    with pytest.raises(ValueError, match=r"needs \[16, 2\]"):
        torch.ops.humming.pack_weight(q.codes, q.scales[:, :1], q.zeros, "u4g64-sbf16-zi", 1)
    with pytest.raises(ValueError, match="needs zero points"):
        torch.ops.humming.pack_weight(q.codes, q.scales, None, "u4g64-sbf16-zi", 1)
    with pytest.raises(ValueError, match="unknown weight layout"):
        ha.pack_weight(q, layout="wgmma")
    with pytest.raises(ValueError, match="needs a global scale"):
        ha.pack_weight(q.codes, q.scales, q.zeros, None, "u4g64-sbf16-zi-gs")
    with pytest.raises(ValueError, match="needs the weight format"):
        ha.pack_weight(q.codes)


@pytest.mark.parametrize("fmt", ["e2m1g32-se8m0", "e2m1g16-se4m3-gs"])
def test_fp4_scales_at_their_extremes_pack_and_nan_ones_are_refused(fmt):
    """MXFP4's e8m0 scale bytes 0x00 (2^-127), 0x7F (1) and 0xFE (2^127), and NVFP4's e4m3 block
    scales at their extremes, pack and unpack exactly, for every layout that holds FP4 codes
    (the generic one, which the 8-bit activation kernels read); a NaN scale (e8m0 0xFF, e4m3 0x7F
    or 0xFF) is refused at packing, naming the group and the byte."""
    import dataclasses

    q = R.quantize_weight(torch.randn(16, 64, generator=torch.Generator().manual_seed(8)), fmt)
    b = q.scales.view(torch.uint8)
    extremes = [0x00, 0x7F, 0xFE] if fmt.endswith("e8m0") else [0x01, 0x7E, 0xFE]
    for i, byte in enumerate(extremes):
        b[i, 0] = byte
    p = ha.pack_weight(q)
    back = ha.unpack_weight(p)
    assert torch.equal(back.codes, q.codes) and torch.equal(back.scales.view(torch.uint8), b)
    for nan in [0xFF] if fmt.endswith("e8m0") else [0x7F, 0xFF]:
        bad = q.scales.clone()
        bad.view(torch.uint8)[5, 1] = nan
        with pytest.raises(ValueError, match=rf"scale at group \[5, 1\] is NaN \(byte 0x{nan:02X}\)"):
            ha.pack_weight(dataclasses.replace(q, scales=bad))


def test_quantize_act_error_paths():
    with pytest.raises(ValueError, match="is not quantized"):
        ha.quantize_act(torch.randn(2, 8), "bf16")
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        torch.ops.humming.quantize_act(torch.ones(2, 8, dtype=torch.int32), "e4m3-pt")
    with pytest.raises(ValueError, match="2-D"):
        torch.ops.humming.quantize_act(torch.ones(8), "e4m3-pt")


def test_meta_shapes():
    q, p = _packed()
    dev = torch.device("meta")
    out = torch.ops.humming.gemm(
        torch.empty(5, 128, dtype=torch.bfloat16, device=dev),
        p.codes.to(dev),
        p.scales.to(dev),
        p.zeros.to(dev),
        None,
        None,
        None,
        "a-bf16_w-u4g64-sbf16-zi_c-f32",
        1,
        16,
        128,
        "",
    )
    assert out.shape == (5, 16) and out.dtype == torch.float32 and out.device.type == "meta"
    pc, ps, pz = torch.ops.humming.pack_weight(q.codes.to(dev), q.scales.to(dev), q.zeros.to(dev), "u4g64-sbf16-zi", 1)
    assert pc.shape == p.codes.shape and ps.shape == p.scales.shape and pz.shape == p.zeros.shape
