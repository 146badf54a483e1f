"""Bad input, fuzzed: every op and the Python API called with randomly broken arguments, on the CPU,
and the op-level cases again on the GPU (the GPU half, at the end: skipped where there is none).

Each case starts from a valid call (a weight quantized by the reference, packed for a layout, and
activations in the format's dtype), breaks one thing chosen from a fixed seed, and asserts that the
call either computes the right answer (the reference on the CPU) or raises an exception whose message
names the broken argument. A case that crashes the process shows in the subprocess sweep below; one
that hangs is killed by faulthandler with a traceback (no timeout plugin needed).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import random
import subprocess
import sys
import warnings

import pytest
import torch

import humming_aot as ha
from humming_aot import formats as F
from humming_aot import reference as R
from humming_aot.pack import PackedWeight
from humming_aot.testing import assert_gemm_close

SEED = 20261201
CASES_PER_MUTATION = 30
# Errors a user can act on. AttributeError, KeyError and friends are not among them: they name
# Python internals, not the argument that was wrong.
ALLOWED = (TypeError, ValueError, RuntimeError, IndexError, NotImplementedError)
HANG_LIMIT_S = 60

WEIGHT_FORMATS = [
    "u4g128-sbf16",
    "u4g128-sf16-zi",
    "u4g64-sbf16-zf",
    "i4g128-sbf16",
    "u8gc-sbf16",
    "i8gc-sf32",
    "u3g32-sbf16",
    "u5g32-sf16-zi",
    "e2m1g32-se8m0",
    "e2m1g16-se4m3-gs",
    "e4m3g128n128-sf32",
    "e4m3",
]
ACT_FORMATS = ["bf16", "f16", "e4m3-pt", "i8-pt", "e4m3-g32"]


@dataclasses.dataclass(frozen=True)
class Spec:
    """A valid call: what the mutation starts from."""

    wfmt: str
    act: str
    out: str
    layout: str
    m: int
    n: int
    k: int
    bias: bool

    @property
    def w(self) -> F.WeightFormat:
        return F.parse_weight_format(self.wfmt)

    @property
    def act_quantized(self) -> bool:
        return F.parse_activation_format(self.act).quantized


def _random_spec(rng: random.Random) -> Spec:
    wfmt = rng.choice(WEIGHT_FORMATS)
    act = rng.choice(ACT_FORMATS)
    quantized = F.parse_activation_format(act).quantized
    out = rng.choice(["bf16", "f16", "f32"]) if quantized else act
    bits = F.parse_weight_format(wfmt).code.bits
    layout = rng.choice(["generic", "sm80", "sm90"]) if bits in (4, 8) else "generic"
    return Spec(
        wfmt,
        act,
        out,
        layout,
        m=rng.randint(1, 5),
        n=rng.choice([8, 16, 24, 40, 72]),
        k=rng.choice([32, 64, 96, 128, 160]),
        bias=rng.random() < 0.3,
    )


class Base:
    """The tensors of a valid call for ``spec`` and its reference result."""

    def __init__(self, spec: Spec, seed: int):
        self.spec = spec
        g = torch.Generator().manual_seed(seed)
        self.fmt = str(F.GemmFormat(spec.act, spec.wfmt, spec.out))
        self.q = R.quantize_weight(torch.randn(spec.n, spec.k, generator=g) * 0.05, spec.wfmt)
        self.p = ha.pack_weight(self.q, layout=spec.layout)
        x = torch.randn(spec.m, spec.k, generator=g)
        self.x = x.to(torch.bfloat16) if spec.act_quantized else x.to(R.torch_dtype(spec.act))
        if spec.act_quantized:
            self.a, self.a_scales = ha.quantize_act(self.x, spec.act)
        else:
            self.a, self.a_scales = self.x, None
        self.out_dtype = R.torch_dtype(spec.out)
        self.bias = (torch.randn(spec.n, generator=g) * 0.1).to(self.out_dtype) if spec.bias else None

    # The raw op's arguments, as a dict so that a mutation replaces one by name.
    def op_args(self) -> dict:
        p = self.p
        return dict(
            a=self.a,
            codes=p.codes,
            scales=p.scales,
            zeros=p.zeros,
            global_scale=p.global_scale,
            a_scales=self.a_scales,
            bias=self.bias,
            fmt=self.fmt,
            layout=p.layout,
            n=p.n,
            k=p.k,
            instance="",
        )

    def check_gemm(self, out, a=None, a_scales=None, q=None, what="gemm"):
        """``out`` is the reference GEMM of (a, q) (by default the valid call's)."""
        a = self.a if a is None else a
        a_scales = self.a_scales if a_scales is None else a_scales
        q = self.q if q is None else q
        assert isinstance(out, torch.Tensor), f"{what} returned {type(out).__name__}"
        assert out.dtype == self.out_dtype and out.device.type == "cpu", f"{what}: {out.dtype} on {out.device}"
        assert tuple(out.shape) == (a.shape[0], q.codes.shape[0]), f"{what}: shape {tuple(out.shape)}"
        ref = R.gemm(a, q, self.spec.act, a_scales, self.out_dtype, self.bias)
        a_deq = R.dequantize_activation(a, a_scales, self.spec.act)
        assert_gemm_close(out, ref, a_deq, R.dequantize_weight(q), what)


@dataclasses.dataclass
class Call:
    fn: object  # () -> result
    keywords: tuple  # one of them must be in the error message (lower case)
    oracle: object = None  # (result) -> None, asserting it is right; None: the call must raise


@dataclasses.dataclass
class OpCall:
    """A call of torch.ops.humming.<name> with these arguments (kept, so that the GPU half can move
    the call's tensors to the GPU)."""

    name: str
    args: dict

    def __call__(self):
        return getattr(torch.ops.humming, self.name)(*self.args.values())


def _op(name, args: dict):
    return OpCall(name, args)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` that starts one element into its storage (not 16-byte aligned)."""
    buf = torch.empty(t.numel() + 1, dtype=t.dtype)
    v = buf[1:].view(t.shape)
    v.copy_(t)
    return v


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a non-contiguous view (every other column of a wider buffer)."""
    buf = torch.zeros(t.shape[0], 2 * t.shape[1], dtype=t.dtype)
    v = buf[:, ::2]
    v.copy_(t)
    return v


def _differs(t: torch.Tensor, like: torch.Tensor) -> bool:
    """Whether ``t`` is not a valid stand-in for ``like`` (other shape, dtype or not contiguous)."""
    return t.shape != like.shape or t.dtype != like.dtype or not t.is_contiguous()


def _other_dtype(rng, t: torch.Tensor) -> torch.dtype:
    return rng.choice(
        [
            d
            for d in (
                torch.float32,
                torch.float16,
                torch.bfloat16,
                torch.int8,
                torch.uint8,
                torch.int32,
                torch.int64,
                torch.float64,
            )
            if d != t.dtype
        ]
    )


def _tampered_oracle(base: Base, p: PackedWeight):
    """For a packed weight changed behind the API's back the right answer is what its bits say:
    the reference GEMM of its own unpacking. (The op cannot know which bits the user meant.)"""

    def check(out):
        try:
            q = ha.unpack_weight(p)
        except ALLOWED as e:  # gemm took a weight that unpack refuses: one of them is wrong
            raise AssertionError(f"gemm accepted a packed weight that unpack_weight refuses: {e}") from e
        base.check_gemm(out, q=q, what="tampered gemm")

    return check


# ---- mutations of torch.ops.humming.gemm / auto_gemm ---------------------------------------------
# Each takes (base, rng, op name) and returns a Call.


def m_a_dtype(b, rng, op):
    args = b.op_args()
    args["a"] = b.a.to(_other_dtype(rng, b.a))
    return Call(_op(op, args), ("activations",))


def m_a_shape(b, rng, op):
    args = b.op_args()
    a = b.a
    args["a"] = rng.choice([a.reshape(-1), a.unsqueeze(0), a[:, :-1].contiguous(), torch.cat([a, a[:, :1]], 1)])
    return Call(_op(op, args), ("activations",))


def m_a_transposed(b, rng, op):
    # Same shape and values, column-major: the op may copy or refuse, never misread.
    args = b.op_args()
    args["a"] = b.a.t().contiguous().t()
    return Call(_op(op, args), ("stride",), b.check_gemm)


def m_a_column_stride(b, rng, op):
    args = b.op_args()
    args["a"] = _strided(b.a)
    return Call(_op(op, args), ("stride",), b.check_gemm)


def m_a_overlapping_rows(b, rng, op):
    # Rows that overlap (row stride below k) cannot be a real matrix; m >= 2 so that it matters.
    # The raw op refuses them; a wrapper that copies the view first computes what the view says.
    args = b.op_args()
    m, k = b.a.shape
    v = b.a.as_strided((m, k), (k // 2, 1))
    args["a"] = v
    return Call(_op(op, args), ("stride",), lambda out: b.check_gemm(out, a=v.contiguous()))


def m_a_misaligned(b, rng, op):
    args = b.op_args()
    args["a"] = _misaligned(b.a)
    return Call(_op(op, args), ("align",), b.check_gemm)


def m_meta(b, rng, op):
    # The one other device a CPU build has: one tensor on meta, the others on the CPU. (A meta
    # tensor sends the call to the fake kernel, which must check devices as the real one does.)
    args = b.op_args()
    name = rng.choice([n for n in ("a", "codes", "scales", "zeros", "a_scales", "bias") if args[n] is not None])
    args[name] = args[name].to("meta")
    return Call(_op(op, args), ("device", "meta"))


def m_codes_dtype(b, rng, op):
    args = b.op_args()
    args["codes"] = b.p.codes.to(rng.choice([torch.int64, torch.uint8, torch.float32, torch.int16]))
    return Call(_op(op, args), ("packed codes",))


def m_codes_shape(b, rng, op):
    args = b.op_args()
    c = b.p.codes
    args["codes"] = rng.choice([c[:-1].contiguous(), c[:, :-1].contiguous(), c.reshape(-1), torch.cat([c, c[:1]])])
    return Call(_op(op, args), ("packed codes",))


def m_codes_strided(b, rng, op):
    args = b.op_args()
    args["codes"] = _strided(b.p.codes)
    return Call(_op(op, args), ("packed codes",), b.check_gemm)


def m_scales(b, rng, op):
    args = b.op_args()
    s = b.p.scales
    if s is None:  # a format without scales handed some
        args["scales"] = torch.ones(1, 1, dtype=torch.bfloat16)
    else:
        # Only changes that leave a different tensor (a 1 x 1 grid transposed is the same grid).
        bad = [None, s.to(_other_dtype(rng, s)), s.t().contiguous(), s[:, :-1].contiguous(), s.reshape(-1), s.t()]
        args["scales"] = rng.choice([t for t in bad if t is None or _differs(t, s)])
    return Call(_op(op, args), ("scales",))


def m_zeros(b, rng, op):
    args = b.op_args()
    z = b.p.zeros
    if z is None:
        args["zeros"] = torch.zeros(b.p.scales.shape if b.p.scales is not None else (1, 1), dtype=torch.uint8)
    else:
        args["zeros"] = rng.choice([None, z.to(_other_dtype(rng, z)), z[:-1].contiguous(), z.reshape(-1)])
    return Call(_op(op, args), ("zero points",))


def m_global_scale(b, rng, op):
    args = b.op_args()
    gs = b.p.global_scale
    if gs is None:
        args["global_scale"] = torch.ones(1)
    else:
        args["global_scale"] = rng.choice([None, gs.to(torch.float16), torch.ones(2), torch.ones(0)])
    return Call(_op(op, args), ("global scale",))


def m_a_scales(b, rng, op):
    args = b.op_args()
    s = b.a_scales
    if s is None:
        args["a_scales"] = torch.ones(b.spec.m, 1)
    else:
        args["a_scales"] = rng.choice([None, s.to(torch.float16), s[:-1], torch.ones(s.shape[0], s.shape[1] + 1)])
    return Call(_op(op, args), ("activation scales", "takes no scales"))


def m_bias(b, rng, op):
    args = b.op_args()
    bias = torch.zeros(b.spec.n, dtype=b.out_dtype)
    args["bias"] = rng.choice([bias[:-1], bias.to(torch.float64), bias.reshape(1, -1), torch.zeros(b.spec.n + 1)])
    return Call(_op(op, args), ("bias",))


BAD_FORMATS = [
    "",
    "garbage",
    "a-bf16_w-u9g128-sbf16_c-bf16",
    "a-bf16_w-u4g0-sbf16_c-bf16",
    "a-bf16_w-u4g3-sbf16_c-bf16",
    "a-bf16_w-u4g128-su4_c-bf16",
    "a-bf16_w-u4g128-sbf16_c-e4m3",
    "a-x7_w-u4g128-sbf16_c-bf16",
    "a-bf16_w-i4g128-sbf16-zi_c-bf16",
    "a-e4m3-g48_w-u4g64-sbf16_c-bf16",
    "a-bf16_w-u4g128-sbf16_c-bf16_extra",
    "a-bf16_w-u4g128-sbf16",
    "a-bf16_w-u4g128-sbf16-gs-gs_c-bf16",
]


def m_bad_format(b, rng, op):
    args = b.op_args()
    args["fmt"] = rng.choice(BAD_FORMATS)
    return Call(_op(op, args), ("format", "cannot parse", "unknown", "group", "zero", "type"))


def m_other_format(b, rng, op):
    # A valid format whose weight part has other bits or grouping than the packed tensors: the
    # packed shapes then disagree with it (same-sized reinterpretations are the caller's choice).
    args = b.op_args()
    w = rng.choice([f for f in WEIGHT_FORMATS if F.parse_weight_format(f).code.bits != b.spec.w.code.bits])
    args["fmt"] = str(F.GemmFormat(b.spec.act, w, b.spec.out))
    # Where every packed shape happens to fit the other format too, the op reads the bits as that
    # format says: the right answer is then that format's unpacking.
    other = dataclasses.replace(b.p, fmt=F.parse_weight_format(w))
    return Call(
        _op(op, args), ("packed codes", "scales", "zero points", "global scale", "layout"), _tampered_oracle(b, other)
    )


def m_act_format_mismatch(b, rng, op):
    # The format's activation type differs from a's dtype.
    args = b.op_args()
    act = rng.choice(
        [x for x in ACT_FORMATS if F.parse_activation_format(x).type != F.parse_activation_format(b.spec.act).type]
    )
    out = b.spec.out if F.parse_activation_format(act).quantized else act
    args["fmt"] = str(F.GemmFormat(act, b.spec.wfmt, out))
    return Call(_op(op, args), ("activations", "activation scales", "takes no scales", "group"))


def m_layout_unknown(b, rng, op):
    args = b.op_args()
    args["layout"] = rng.choice([0, 5, -1, 99, 2**40])
    return Call(_op(op, args), ("layout",))


def m_layout_swapped(b, rng, op):
    # Another valid layout id: the shapes may still match, then the bits are read the other way.
    args = b.op_args()
    lid = rng.choice([lay for lay in (1, 2, 3) if lay != b.p.layout])
    args["layout"] = lid
    tampered = dataclasses.replace(b.p, layout=lid)
    return Call(_op(op, args), ("layout", "packed codes", "scales", "zero points"), _tampered_oracle(b, tampered))


def m_nk(b, rng, op):
    args = b.op_args()
    which = rng.choice(["n", "k"])
    args[which] = v = rng.choice([0, -1, -(2**31), 2**31, 2**62, args[which] + 1, args[which] - 1])
    # n moved within the padding still fits the packed shapes: then the padding rows are read, as
    # the tampered weight's own unpacking says.
    oracle = _tampered_oracle(b, dataclasses.replace(b.p, **{which: v})) if v > 0 else None
    return Call(
        _op(op, args),
        ("packed codes", "activations", "scales", "zero points", "bias", "n=", "k=", "n ", "k "),
        oracle,
    )


def m_instance(b, rng, op):
    args = b.op_args()
    args["instance"] = rng.choice(["nope", "sm80_" + "x" * 300, "\x00", "cpu-reference "])
    return Call(_op(op, args), ("instance",))


def m_not_a_tensor(b, rng, op):
    args = b.op_args()
    name = rng.choice(["a", "codes", "scales", "bias", "fmt", "layout", "n"])
    args[name] = rng.choice([[1, 2], "x", 3.5, object()]) if name != "scales" else "scales"
    return Call(_op(op, args), (name, "format") if name == "fmt" else (name,))


GEMM_MUTATIONS = {
    f.__name__[2:]: f
    for f in (
        m_a_dtype,
        m_a_shape,
        m_a_transposed,
        m_a_column_stride,
        m_a_overlapping_rows,
        m_a_misaligned,
        m_meta,
        m_codes_dtype,
        m_codes_shape,
        m_codes_strided,
        m_scales,
        m_zeros,
        m_global_scale,
        m_a_scales,
        m_bias,
        m_bad_format,
        m_other_format,
        m_act_format_mismatch,
        m_layout_unknown,
        m_layout_swapped,
        m_nk,
        m_instance,
        m_not_a_tensor,
    )
}


# ---- torch.ops.humming.pack_weight / unpack_weight / quantize_act --------------------------------


def _pack_args(b: Base) -> dict:
    q = b.q
    return dict(codes=q.codes, scales=q.scales, zeros=q.zeros, weight_format=b.spec.wfmt, layout=b.p.layout)


def _check_roundtrip(b: Base, q_codes=None):
    def check(res):
        pc, ps, pz = res
        w = b.spec.w
        p = dataclasses.replace(b.p, codes=pc, scales=ps if w.scale else None, zeros=pz if w.zero != "none" else None)
        u = ha.unpack_weight(p)
        assert torch.equal(u.codes, b.q.codes if q_codes is None else q_codes), "pack lost codes"
        if w.scale is not None:
            assert torch.equal(u.scales.view(torch.uint8), b.q.scales.contiguous().view(torch.uint8)), (
                "pack lost scales"
            )

    return check


def p_codes_dtype(b, rng):
    args = _pack_args(b)
    args["codes"] = b.q.codes.to(rng.choice([torch.int8, torch.int32, torch.float32, torch.bool]))
    return Call(_op("pack_weight", args), ("codes",))


def p_codes_shape(b, rng):
    args = _pack_args(b)
    c = b.q.codes
    args["codes"] = bad = rng.choice([c.reshape(-1), c.unsqueeze(0), c[:-1], c[:, :-1]])

    def check(res):
        # One row or column fewer can still match the scale grid: then it is a valid smaller weight.
        assert bad.dim() == 2, f"pack_weight took {bad.dim()}-D codes"
        pc, ps, pz = res
        w = b.spec.w
        n, k = bad.shape
        u = torch.ops.humming.unpack_weight(pc, ps, pz, b.spec.wfmt, b.p.layout, n, k)
        assert torch.equal(u[0], bad), "pack lost codes"
        assert w.scale is None or tuple(u[1].shape) == tuple(b.q.scales.shape)

    return Call(_op("pack_weight", args), ("codes", "scales", "zero points"), check)


def p_codes_out_of_range(b, rng):
    # A code wider than the format's bits would spill into its neighbour's bits if packed.
    bits = b.spec.w.code.bits
    if bits == 8:
        return p_codes_dtype(b, rng)
    codes = b.q.codes.clone()
    codes[rng.randrange(codes.shape[0]), rng.randrange(codes.shape[1])] = rng.randint(1 << bits, 255)
    return Call(
        lambda: ha.pack_weight(codes, b.q.scales, b.q.zeros, b.q.global_scale, b.spec.wfmt, layout=b.spec.layout),
        ("code",),
    )


def p_raw_codes_out_of_range(b, rng):
    # The same through the raw op (torch.ops.humming.pack_weight), which C++ callers of the
    # binding and traced graphs reach without the Python wrapper's check.
    bits = b.spec.w.code.bits
    if bits == 8:
        return p_codes_dtype(b, rng)
    args = _pack_args(b)
    codes = b.q.codes.clone()
    codes[rng.randrange(codes.shape[0]), rng.randrange(codes.shape[1])] = rng.randint(1 << bits, 255)
    args["codes"] = codes
    return Call(_op("pack_weight", args), ("code",))


def p_codes_views(b, rng):
    # Strided and misaligned codes: packed as their values say.
    args = _pack_args(b)
    args["codes"] = rng.choice([_strided(b.q.codes), _misaligned(b.q.codes), b.q.codes.t().contiguous().t()])
    return Call(_op("pack_weight", args), ("codes",), _check_roundtrip(b))


def p_scales(b, rng):
    args = _pack_args(b)
    s = b.q.scales
    if s is None:
        args["scales"] = torch.ones(1, 1, dtype=torch.bfloat16)
    else:
        # pack_weight copies grids to contiguous ones, so only another shape or dtype is wrong here.
        bad = [s.to(_other_dtype(rng, s)), s.t(), s[:, :-1], s.reshape(-1), torch.cat([s, s])]
        args["scales"] = rng.choice([None] + [t for t in bad if t.shape != s.shape or t.dtype != s.dtype])
    return Call(_op("pack_weight", args), ("scales",))


def p_zeros(b, rng):
    args = _pack_args(b)
    z = b.q.zeros
    if z is None:
        args["zeros"] = torch.zeros(1, 1, dtype=torch.uint8)
    else:
        args["zeros"] = rng.choice([None, z.to(_other_dtype(rng, z)), z[:-1], z.reshape(-1)])
    return Call(_op("pack_weight", args), ("zero points",))


def p_format(b, rng):
    args = _pack_args(b)
    args["weight_format"] = rng.choice(
        [
            "",
            "u4",
            "u4g128",
            "u4g128-s",
            "x4g128-sbf16",
            "u4g128-sbf16-zq",
            "u33g32-sbf16",
            "u4g-1-sbf16",
            "u4g128n-sbf16",
            "a-bf16_w-u4g128-sbf16_c-bf16",
        ]
    )
    return Call(_op("pack_weight", args), ("format", "cannot parse", "group", "scale", "type", "bits"))


def p_layout(b, rng):
    args = _pack_args(b)
    bits = b.spec.w.code.bits
    # An unknown id, or a fast layout for codes it has no packing for.
    args["layout"] = rng.choice([0, 5, -7, 2**33] + ([2, 3] if bits not in (4, 8) else []))
    return Call(_op("pack_weight", args), ("layout",))


def u_tampered(b, rng):
    w = b.spec.w
    p = b.p
    empty = torch.empty(0, dtype=torch.uint8)
    args = dict(
        codes=p.codes,
        scales=p.scales if p.scales is not None else empty,
        zeros=p.zeros if p.zeros is not None else empty,
        weight_format=b.spec.wfmt,
        layout=p.layout,
        n=p.n,
        k=p.k,
    )
    choice = rng.choice(["codes", "scales", "layout", "n", "k", "fmt"])
    kw = {
        "codes": ("packed codes",),
        "scales": ("scales", "zero points", "packed codes"),
        "layout": ("layout",),
        "n": ("packed codes", "n"),
        "k": ("packed codes", "k"),
        "fmt": ("format", "cannot parse"),
    }[choice]
    if choice == "codes":
        args["codes"] = rng.choice([p.codes[:-1].contiguous(), p.codes.to(torch.int64), p.codes.reshape(-1)])
    elif choice == "scales":
        key = "zeros" if (w.zero != "none" and rng.random() < 0.5) or w.scale is None else "scales"
        t = args[key]
        args[key] = t[:, :-1].contiguous() if t.dim() == 2 else torch.ones(3, 3)
    elif choice == "layout":
        args["layout"] = rng.choice([0, 5, -1])
    elif choice in ("n", "k"):
        # (Past the padded extent: a value inside the padding, such as 128 for a 16-channel weight
        # padded to 128, describes the same packed tensor and is not tampering.)
        padded = p.n_pad if choice == "n" else p.k_pad
        args[choice] = rng.choice([-1, 0, 2**40, padded * 2 + 64])
    else:
        args["weight_format"] = "u4g128-sbf16-zz"

    def check(res):
        # A grid the format has no use for is ignored (the schema has no optional tensors): then
        # the unpacking must still be the right one.
        assert choice == "scales" and w.scale is None and w.zero == "none", "unpack_weight took tampered input"
        assert torch.equal(res[0], b.q.codes)

    return Call(_op("unpack_weight", args), kw, check)


def q_act(b, rng):
    x = b.x
    choice = rng.choice(["dtype", "dim", "empty_k", "stride", "unquantized", "badfmt", "views"])
    act = b.spec.act if b.spec.act_quantized else "e4m3-pt"
    if choice == "dtype":
        return Call(
            _op("quantize_act", dict(x=x.to(rng.choice([torch.int8, torch.int32, torch.float64])), f=act)),
            ("activations",),
        )
    if choice == "dim":
        return Call(
            _op("quantize_act", dict(x=rng.choice([x.reshape(-1), x.unsqueeze(0)]), f=act)), ("activations", "2-d")
        )
    if choice == "empty_k":
        return Call(_op("quantize_act", dict(x=x[:, :0], f=act)), ("k > 0", "columns"))
    if choice == "stride":
        return Call(_op("quantize_act", dict(x=_strided(x), f=act)), ("stride",))
    if choice == "unquantized":
        return Call(_op("quantize_act", dict(x=x, f=rng.choice(["bf16", "f16"]))), ("not quantized",))
    if choice == "badfmt":
        return Call(
            _op("quantize_act", dict(x=x, f=rng.choice(["e4m3-g0", "e4m3-g3", "u4-pt", "i8-px", ""]))),
            ("format", "cannot parse", "group", "type"),
        )
    v = rng.choice([_misaligned(x), x.t().contiguous().t()])

    def check(res):
        codes, scales = res
        rc, rs = R.quantize_activation(x, act)
        assert torch.equal(codes.view(torch.uint8), rc.view(torch.uint8)) and torch.equal(scales, rs), (
            "quantize_act differs"
        )

    return Call(_op("quantize_act", dict(x=v, f=act)), ("stride",), check)


OP_MUTATIONS = {
    f.__name__: f
    for f in (
        p_codes_dtype,
        p_codes_shape,
        p_codes_out_of_range,
        p_raw_codes_out_of_range,
        p_codes_views,
        p_scales,
        p_zeros,
        p_format,
        p_layout,
        u_tampered,
        q_act,
    )
}


# ---- the Python API: humming_aot.gemm, pack_weight, QuantLinear ----------------------------------


def api_gemm_tampered(b, rng):
    p = b.p
    choice = rng.choice(["codes", "scales", "layout_unknown", "layout_swap", "fmt", "n", "not_packed", "a_list"])
    if choice == "codes":
        t = dataclasses.replace(p, codes=rng.choice([p.codes[:-1], p.codes[:, 1:], p.codes.reshape(-1)]))
        return Call(lambda: ha.gemm(b.a, t, b.fmt, a_scales=b.a_scales, bias=b.bias), ("packed codes",))
    if choice == "scales":
        if p.scales is None:
            t = dataclasses.replace(p, scales=torch.ones(1, 1, dtype=torch.bfloat16))
        else:
            bad = [p.scales.t(), p.scales[:-1], p.scales.float().half(), p.scales.float()]
            t = dataclasses.replace(p, scales=rng.choice([s for s in bad if _differs(s, p.scales)]))
        return Call(lambda: ha.gemm(b.a, t, b.fmt, a_scales=b.a_scales, bias=b.bias), ("scales",))
    if choice == "layout_unknown":
        t = dataclasses.replace(p, layout=rng.choice([0, 7, -2]))
        return Call(lambda: ha.gemm(b.a, t, b.fmt, a_scales=b.a_scales, bias=b.bias), ("layout",))
    if choice == "layout_swap":
        t = dataclasses.replace(p, layout=rng.choice([x for x in (1, 2, 3) if x != p.layout]))
        return Call(
            lambda: ha.gemm(b.a, t, b.fmt, a_scales=b.a_scales, bias=b.bias),
            ("layout", "packed codes", "scales"),
            _tampered_oracle(b, t),
        )
    if choice == "fmt":
        other = rng.choice([f for f in WEIGHT_FORMATS if f != b.spec.wfmt])
        fmt = str(F.GemmFormat(b.spec.act, other, b.spec.out))
        return Call(lambda: ha.gemm(b.a, p, fmt, a_scales=b.a_scales, bias=b.bias), ("differs",))
    if choice == "n":
        t = dataclasses.replace(p, n=p.n + rng.choice([1, -1, 100]))
        return Call(
            lambda: ha.gemm(b.a, t, b.fmt, a_scales=b.a_scales, bias=b.bias),
            ("packed codes", "bias"),
            _tampered_oracle(b, t),
        )
    if choice == "not_packed":
        w = rng.choice([p.codes, b.q, None, "weights"])
        return Call(lambda: ha.gemm(b.a, w, b.fmt, a_scales=b.a_scales), ("packedweight",))
    return Call(lambda: ha.gemm(b.a.tolist(), p, b.fmt, a_scales=b.a_scales), ("activations", "tensor"))


def api_pack(b, rng):
    q = b.q
    choice = rng.choice(["gs", "no_fmt", "codes_list", "layout", "fmt_obj", "scales_list"])
    if choice == "gs":
        gs = q.global_scale if q.global_scale is not None else torch.ones(())
        bad = rng.choice([torch.ones(2), "x", None if q.global_scale is not None else gs, [1.0, 2.0]])
        return Call(lambda: ha.pack_weight(q.codes, q.scales, q.zeros, bad, b.spec.wfmt), ("global scale",))
    if choice == "no_fmt":
        return Call(lambda: ha.pack_weight(q.codes, q.scales, q.zeros, q.global_scale), ("format", "fmt"))
    if choice == "codes_list":
        return Call(
            lambda: ha.pack_weight(q.codes.tolist(), q.scales, q.zeros, q.global_scale, b.spec.wfmt), ("codes",)
        )
    if choice == "layout":
        lay = rng.choice(["sm70", "", None, 2.5, "2", 99])
        return Call(lambda: ha.pack_weight(q, layout=lay), ("layout",))
    if choice == "fmt_obj":
        return Call(lambda: ha.pack_weight(q.codes, q.scales, q.zeros, q.global_scale, 4), ("format",))
    return Call(lambda: ha.pack_weight(q.codes, "scales", q.zeros, q.global_scale, b.spec.wfmt), ("scales",))


def api_layer(b, rng):
    p = b.p
    choice = rng.choice(
        ["x_dtype", "x_0d", "x_features", "x_views", "x_3d", "x_meta", "bias", "in_perm", "act", "out", "tampered"]
    )
    if choice in ("act", "out"):
        bad = rng.choice(["bf17", "", "e4m3-g0", "u4"])
        kwargs = {"act_format": bad} if choice == "act" else {"act_format": b.spec.act, "out_dtype": bad}
        return Call(
            lambda: ha.QuantLinear.from_packed(p, **kwargs), ("format", "type", "cannot parse", "group", "output")
        )
    if choice == "bias":
        bias = rng.choice([torch.zeros(p.n + 1), torch.zeros(1, p.n), torch.zeros(())])
        return Call(lambda: ha.QuantLinear.from_packed(p, b.spec.act, b.spec.out, bias), ("bias",))
    if choice == "in_perm":
        perm = rng.choice([torch.arange(p.k + 1), torch.full((p.k,), p.k), torch.arange(p.k).flip(0)[:-1]])
        layer = lambda: ha.QuantLinear.from_packed(p, b.spec.act, b.spec.out, in_perm=perm)(b.x)
        return Call(layer, ("in_perm", "index"))
    if choice == "tampered":
        t = dataclasses.replace(p, layout=rng.choice([0, 9]))
        return Call(lambda: ha.QuantLinear.from_packed(t, b.spec.act, b.spec.out)(b.x), ("layout",))
    layer = ha.QuantLinear.from_packed(p, b.spec.act, b.spec.out, b.bias)
    x = b.x

    def check_layer(inp):
        def check(out):
            flat = inp.reshape(-1, p.k).contiguous()
            if b.spec.act_quantized:
                a, s = R.quantize_activation(flat, b.spec.act)
            else:
                a, s = flat, None
            b.check_gemm(out.reshape(-1, p.n), a=a, a_scales=s, what="QuantLinear")

        return check

    if choice == "x_dtype":
        bad = x.to(
            rng.choice([torch.int8, torch.int64, torch.float64] + ([] if b.spec.act_quantized else [torch.float32]))
        )
        return Call(lambda: layer(bad), ("activations", "dtype", "float"))
    if choice == "x_0d":
        bad = rng.choice([torch.tensor(1.0, dtype=x.dtype), torch.ones(0, dtype=x.dtype)])
        return Call(lambda: layer(bad), ("features", "input"))
    if choice == "x_features":
        bad = rng.choice([x[:, :-1], torch.cat([x, x], 1), x.t()])
        return Call(lambda: layer(bad), ("features",))
    if choice == "x_meta":
        return Call(lambda: layer(x.to("meta")), ("device", "meta"))
    if choice == "x_3d":
        v = x.reshape(1, *x.shape).expand(2, *x.shape)
        return Call(lambda: layer(v), (), check_layer(v))
    v = rng.choice([_strided(x), _misaligned(x), x.t().contiguous().t()])
    return Call(lambda: layer(v), (), check_layer(v))


API_MUTATIONS = {f.__name__: f for f in (api_gemm_tampered, api_pack, api_layer)}


# ---- the generated cases -------------------------------------------------------------------------


def _needs(mutation: str, spec: Spec) -> bool:
    """Whether ``spec`` is a base the mutation means something for."""
    if mutation == "a_overlapping_rows":
        return spec.m >= 2
    if mutation == "a_column_stride" or mutation == "a_transposed":
        return spec.m >= 2
    return True


def _generate():
    rng = random.Random(SEED)
    cases = []
    groups = [(f"gemm.{n}", ("gemm", n)) for n in GEMM_MUTATIONS]
    groups += [(f"auto_gemm.{n}", ("auto_gemm", n)) for n in GEMM_MUTATIONS]
    groups += [(n, ("op", n)) for n in OP_MUTATIONS]
    groups += [(n, ("api", n)) for n in API_MUTATIONS]
    for name, (kind, mut) in groups:
        count = CASES_PER_MUTATION * (3 if kind == "api" else 1)
        for i in range(count):
            spec = _random_spec(rng)
            while not _needs(mut, spec):
                spec = _random_spec(rng)
            seed = rng.randrange(2**31)
            cases.append(pytest.param(kind, mut, spec, seed, id=f"{name}-{i}-{spec.wfmt}-{spec.act}-{spec.layout}"))
    return cases


CASES = _generate()


def _build_call(kind, mut, spec, seed) -> Call:
    b = Base(spec, seed)
    rng = random.Random(seed)
    if kind in ("gemm", "auto_gemm"):
        return GEMM_MUTATIONS[mut](b, rng, kind)
    if kind == "op":
        return OP_MUTATIONS[mut](b, rng)
    return API_MUTATIONS[mut](b, rng)


def _run_case(kind, mut, spec, seed) -> None:
    call = _build_call(kind, mut, spec, seed)
    try:
        result = call.fn()
    except ALLOWED as e:
        msg = str(e).lower()
        assert call.keywords, f"a valid call raised {type(e).__name__}: {e}"
        assert any(k in msg for k in call.keywords), (
            f"the message names none of {call.keywords}: {type(e).__name__}: {e}"
        )
        return
    except Exception as e:  # the point: anything else is an unhelpful error
        raise AssertionError(f"{type(e).__name__} is not an error a user can act on: {e}") from e
    assert call.oracle is not None, f"bad input accepted without an error; returned {type(result).__name__}"
    call.oracle(result)


@pytest.fixture
def hang_guard():
    # A hang in C++ never returns to Python, so signal.alarm cannot stop it; faulthandler's watchdog
    # thread dumps every thread's stack and exits the process instead.
    faulthandler.dump_traceback_later(HANG_LIMIT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def test_cases_are_deterministic():
    again = _generate()
    assert [c.id for c in again] == [c.id for c in CASES] and [c.values for c in again] == [c.values for c in CASES]
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("kind,mut,spec,seed", CASES)
def test_fuzz(kind, mut, spec, seed, hang_guard):
    _run_case(kind, mut, spec, seed)


def test_valid_call_still_works_after_the_sweep():
    b = Base(Spec("u4g128-sbf16", "bf16", "bf16", "generic", 3, 16, 128, True), 1)
    b.check_gemm(ha.gemm(b.a, b.p, b.fmt, bias=b.bias))


def test_sweep_does_not_crash_the_process():
    """Every case in a child process: a segfault or abort there fails this test with the case that
    caused it, where in-process it would end the whole pytest run."""
    env = dict(os.environ, HUMMING_FUZZ_SWEEP="1")
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=600)
    last = [ln for ln in done.stdout.splitlines() if ln.startswith("case ")]
    assert done.returncode == 0, f"the sweep died (rc {done.returncode}) in {last[-1:]}: {done.stderr[-2000:]}"
    assert len(last) == len(CASES)


# ---- the GPU half --------------------------------------------------------------------------------
# The op-level cases again with every tensor of the call on the GPU (tensors a mutation made keep
# their strides and storage offset there), and the device mix-ups only a GPU allows: one tensor of
# a valid call left on the CPU. Each call either computes the CPU reference's answer or raises a
# message naming the problem, and the CUDA context stays usable: a valid GEMM after each case is
# checked too. HUMMING_FUZZ_GPU_EVERY takes every N-th op-level case (default 3; 1 for all), e.g.
# for the compute-sanitizer sample of scripts/gpu_sanitize.sh.

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
GPU_EVERY = int(os.environ.get("HUMMING_FUZZ_GPU_EVERY", "3"))
# (p_codes_out_of_range goes through the Python wrapper, not the op: the raw op has its own case.)
GPU_CASES = [c for c in CASES if c.values[0] in ("gemm", "auto_gemm", "op") and c.values[1] != "p_codes_out_of_range"][
    ::GPU_EVERY
]


def _on_gpu(v):
    """A CPU tensor's copy on the GPU with the same shape, strides and storage offset (a view of a
    copy of its whole storage); anything else as it is (meta tensors stay on meta)."""
    if not isinstance(v, torch.Tensor) or v.device.type != "cpu":
        return v
    elems = v.untyped_storage().nbytes() // v.element_size()
    storage = torch.empty(elems, dtype=v.dtype, device="cuda")
    storage.copy_(torch.as_strided(v, (elems,), (1,), 0))
    return storage.as_strided(v.shape, v.stride(), v.storage_offset())


def _on_cpu(res):
    if isinstance(res, torch.Tensor):
        return res.cpu()
    if isinstance(res, tuple):
        return tuple(_on_cpu(r) for r in res)
    return res


def _gpu_still_works():
    b = Base(Spec("u4g128-sbf16", "bf16", "bf16", "generic", 3, 16, 128, True), 1)
    out = ha.gemm(
        b.a.cuda(),
        ha.pack_weight(b.q.codes.cuda(), b.q.scales.cuda(), None, None, "u4g128-sbf16"),
        b.fmt,
        bias=b.bias.cuda(),
    )
    torch.cuda.synchronize()
    b.check_gemm(out.cpu(), what="a valid GPU call after the case")


def _run_gpu_call(call: Call) -> None:
    try:
        result = call.fn()
        torch.cuda.synchronize()
    except ALLOWED as e:
        msg = str(e).lower()
        assert call.keywords, f"a valid GPU call raised {type(e).__name__}: {e}"
        assert any(k in msg for k in call.keywords), (
            f"the message names none of {call.keywords}: {type(e).__name__}: {e}"
        )
    except Exception as e:
        raise AssertionError(f"{type(e).__name__} is not an error a user can act on: {e}") from e
    else:
        assert call.oracle is not None, (
            f"bad input accepted on the GPU without an error; returned {type(result).__name__}"
        )
        call.oracle(_on_cpu(result))
    _gpu_still_works()


def _no_kernel_here(call: OpCall, spec: Spec) -> bool:
    """Whether this build has no instance on this GPU for the format and layout the call names
    (a mutation may have changed either). On the GPU the op chooses an instance before it reads
    the tensors, so a mutated call of such a format may say that instead of naming the mutation:
    true as well, and no fix to the tensors would make it run."""
    from humming_aot import dispatch

    args = call.args
    if not {"fmt", "layout", "n", "k"} <= args.keys():
        return False
    try:
        with warnings.catch_warnings():  # (the slow-path warning of generic-only formats)
            warnings.simplefilter("ignore")
            dispatch.choose(
                args["fmt"], args["n"], args["k"], spec.m, device=torch.device("cuda"), layout=args["layout"]
            )
    except dispatch.DispatchError:
        return True
    except (ValueError, TypeError):  # a mutated format, extent or layout: the op's own message
        return False
    return False


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kind,mut,spec,seed", GPU_CASES)
def test_fuzz_gpu(kind, mut, spec, seed, hang_guard):
    call = _build_call(kind, mut, spec, seed)
    assert isinstance(call.fn, OpCall), "op-level cases call the op"
    gpu = OpCall(call.fn.name, {k: _on_gpu(v) for k, v in call.fn.args.items()})
    keywords = call.keywords
    if keywords and _no_kernel_here(gpu, spec):
        keywords = (*keywords, "no compiled instance")
    _run_gpu_call(Call(gpu, keywords, call.oracle))


DEVICE_MIX_SPECS = [
    Spec("u4g128-sbf16", "bf16", "bf16", "sm90", 3, 40, 128, True),
    Spec("u4g128-sf16-zi", "f16", "f16", "sm80", 2, 72, 128, True),
    Spec("e2m1g16-se4m3-gs", "e4m3-pt", "bf16", "generic", 4, 24, 96, False),
    Spec("i8gc-sf32", "i8-pt", "f32", "generic", 1, 16, 64, True),
]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("spec", DEVICE_MIX_SPECS, ids=[f"{s.wfmt}-{s.act}-{s.layout}" for s in DEVICE_MIX_SPECS])
def test_fuzz_gpu_one_tensor_left_on_the_cpu(spec, hang_guard):
    """Each tensor of a valid GPU call, in turn, left on the CPU: an error naming the device, for
    the GEMM, the packer and the unpacker."""
    b = Base(spec, 7)
    calls = {"gemm": b.op_args(), "pack_weight": _pack_args(b)}
    p = b.p
    calls["unpack_weight"] = dict(
        codes=p.codes,
        scales=p.scales if p.scales is not None else torch.empty(0, dtype=torch.uint8),
        zeros=p.zeros if p.zeros is not None else torch.empty(0, dtype=torch.uint8),
        weight_format=spec.wfmt,
        layout=p.layout,
        n=p.n,
        k=p.k,
    )
    for name, args in calls.items():
        for left in [k for k, v in args.items() if isinstance(v, torch.Tensor) and v.numel() > 0]:
            moved = {k: (v if k == left else _on_gpu(v)) for k, v in args.items()}
            _run_gpu_call(Call(OpCall(name, moved), ("device", "cpu", "cuda")))


if __name__ == "__main__" and os.environ.get("HUMMING_FUZZ_SWEEP"):
    # The child of test_sweep_does_not_crash_the_process: runs every case, failures included (they
    # are the parametrized tests' business), and names each before it starts.
    faulthandler.enable()
    for c in CASES:
        print("case", c.id, flush=True)
        try:
            _run_case(*c.values)
        except Exception:  # noqa: S110 - failures are the parametrized tests' business
            pass
