"""GPTQ importer (humming_aot.convert.gptq) against synthetic checkpoints.

The checkpoints are written here by a packer that follows the published GPTQ layout (AutoGPTQ's
``QuantLinear.pack``: codes as one LSB-first bit stream per output column along K, zero points the
same along N, v1 zero points stored minus one), built on Python integers one bit field at a time, so
it shares nothing with the importer's unpacking. The imported weight must hold the original codes,
scales and zero points exactly, and dequantize (reference.dequantize_weight) to exactly
``scale * (q - z)`` computed here in float32.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, ConvertedWeight, gptq


def to_int32(u: int) -> int:
    return u - (1 << 32) if u >= 1 << 31 else u


def pack_along_rows(values: torch.Tensor, bits: int) -> torch.Tensor:
    """int32 [ceil(L*bits/32), C]: column c is the bit stream sum(values[i, c] << bits*i)."""
    L, C = values.shape
    words = -(-L * bits // 32)
    out = [[0] * C for _ in range(words)]
    for c in range(C):
        stream = 0
        for i in range(L):
            v = int(values[i, c])
            assert 0 <= v < (1 << bits)
            stream |= v << (bits * i)
        for w in range(words):
            out[w][c] = to_int32((stream >> (32 * w)) & 0xFFFFFFFF)
    return torch.tensor(out, dtype=torch.int32)


def pack_along_cols(values: torch.Tensor, bits: int) -> torch.Tensor:
    return pack_along_rows(values.t(), bits).t().contiguous()


def make_checkpoint(K, N, bits, group_size, *, sym, version, act_order, seed, scale_dtype=torch.float16):
    """Known codes q [K, N], real zero points z [G, N], scales [G, N], g_idx [K] and their packing."""
    g = torch.Generator().manual_seed(seed)
    gs = K if group_size == -1 else group_size
    G = -(-K // gs)
    q = torch.randint(0, 1 << bits, (K, N), generator=g)
    if sym:
        z = torch.full((G, N), 1 << (bits - 1))
    elif version == 1:  # v1 cannot store a zero point of 0
        z = torch.randint(1, 1 << bits, (G, N), generator=g)
    else:
        z = torch.randint(0, 1 << bits, (G, N), generator=g)
        z[0, 0], z[-1, -1] = 0, (1 << bits) - 1  # both ends of the range
    scales = ((torch.rand(G, N, generator=g) + 0.05) * 0.02).to(scale_dtype)
    if act_order:
        invperm = torch.randperm(K, generator=g)  # position of input k in the quantization order
        g_idx = (invperm // gs).to(torch.int32)
    else:
        g_idx = (torch.arange(K) // gs).to(torch.int32)
    stored_z = z - 1 if version == 1 else z
    ckpt = {
        "qweight": pack_along_rows(q, bits),
        "qzeros": pack_along_cols(stored_z, bits),
        "scales": scales,
        "g_idx": g_idx,
    }
    return ckpt, q, z, scales, g_idx


def expected_weight(q, z, scales, g_idx):
    """float32 [N, K]: w[n, k] = scales[g, n] * (q[k, n] - z[g, n]), g = g_idx[k]."""
    gi = g_idx.long()
    return (scales.float()[gi] * (q.float() - z.float()[gi])).t()


def check(res: ConvertedWeight, q, z, scales, g_idx, bits, group_size, sym):
    K, N = q.shape
    w = res.weight
    assert w.fmt.code.bits == bits and str(w.fmt.code) == f"u{bits}"
    assert w.fmt.zero == ("none" if sym else "int")
    gs = K if group_size == -1 else group_size
    perm = torch.arange(K) if res.perm is None else res.perm
    if res.perm is not None:
        assert res.perm.dtype == torch.int64
        assert torch.equal(torch.sort(res.perm).values, torch.arange(K))
    # Groups are K-contiguous after the permutation.
    assert torch.equal(g_idx.long()[perm], torch.arange(K) // gs)
    assert torch.equal(w.codes, q.t()[:, perm].to(torch.uint8))
    assert w.scales.dtype == scales.dtype and torch.equal(w.scales, scales.t())
    if sym:
        assert w.zeros is None and R.implied_zero(w.fmt) == 1 << (bits - 1)
    else:
        assert torch.equal(w.zeros, z.t().to(torch.uint8))
    want = expected_weight(q, z, scales, g_idx)
    got = R.dequantize_weight(w)
    assert torch.equal(got, want[:, perm])
    # The documented use of perm: permute the activations, and the product is the original layer's.
    x = torch.randn(3, K, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(
        x.index_select(-1, perm) @ got.double().t(), x @ want.double().t(), rtol=1e-12, atol=1e-12
    )


CASES = [
    # K, N, bits, group_size, sym, version, act_order
    (200, 72, 4, 64, False, 1, False),
    (200, 72, 4, 64, False, 2, False),
    (200, 72, 4, 64, True, 1, False),
    (200, 72, 4, 64, True, 2, False),
    (200, 72, 4, 64, False, 1, True),
    (200, 72, 4, 64, True, 2, True),
    (200, 72, 8, 32, False, 2, False),
    (200, 72, 8, 32, True, 1, True),
    (200, 72, 8, -1, False, 1, False),
    (200, 40, 2, 16, False, 2, True),
    (200, 40, 2, 16, True, 1, False),
    (224, 96, 3, 32, False, 1, False),
    (224, 96, 3, 32, False, 2, True),
    (224, 96, 3, 64, True, 1, True),
    (96, 64, 4, 128, False, 2, False),  # one partial group (K < group size)
]


@pytest.mark.parametrize("K,N,bits,group_size,sym,version,act_order", CASES)
def test_gptq_roundtrip(K, N, bits, group_size, sym, version, act_order):
    ckpt, q, z, scales, g_idx = make_checkpoint(
        K, N, bits, group_size, sym=sym, version=version, act_order=act_order, seed=K * 31 + N + bits
    )
    res = gptq.convert(
        ckpt["qweight"],
        ckpt["qzeros"],
        ckpt["scales"],
        ckpt["g_idx"],
        bits=bits,
        group_size=group_size,
        sym=sym,
        checkpoint_format="gptq" if version == 1 else "gptq_v2",
        layer="l",
    )
    assert res.source == f"gptq_v{version}"
    assert (res.perm is not None) == act_order
    check(res, q, z, scales, g_idx, bits, group_size, sym)
    gran = "gc" if group_size == -1 else f"g{group_size}"
    assert str(res.weight.fmt) == f"u{bits}{gran}-sf16" + ("" if sym else "-zi")


def test_gptq_sym_detected_automatically_and_zi_kept_when_asked():
    ckpt, q, z, scales, g_idx = make_checkpoint(128, 64, 4, 32, sym=True, version=1, act_order=False, seed=3)
    auto = gptq.convert(ckpt["qweight"], ckpt["qzeros"], ckpt["scales"], ckpt["g_idx"], bits=4, group_size=32)
    assert str(auto.weight.fmt) == "u4g32-sf16"
    check(auto, q, z, scales, g_idx, 4, 32, True)
    kept = gptq.convert(
        ckpt["qweight"], ckpt["qzeros"], ckpt["scales"], ckpt["g_idx"], bits=4, group_size=32, sym=False
    )
    assert str(kept.weight.fmt) == "u4g32-sf16-zi"
    check(kept, q, z, scales, g_idx, 4, 32, False)
    assert torch.equal(R.dequantize_weight(auto.weight), R.dequantize_weight(kept.weight))


def test_gptq_v1_symmetric_stores_mid_minus_one():
    # The documented v1 symmetric storage: every 4-bit zero point nibble is 7 (0x77777777 words).
    ckpt, *_ = make_checkpoint(64, 16, 4, 32, sym=True, version=1, act_order=False, seed=4)
    assert bool((ckpt["qzeros"] == 0x77777777).all())


def test_gptq_without_g_idx_and_bf16_scales():
    ckpt, q, z, scales, g_idx = make_checkpoint(
        256, 48, 4, 128, sym=False, version=2, act_order=False, seed=5, scale_dtype=torch.bfloat16
    )
    res = gptq.convert(
        ckpt["qweight"], ckpt["qzeros"], ckpt["scales"], bits=4, group_size=128, checkpoint_format="gptq_v2"
    )
    assert str(res.weight.fmt) == "u4g128-sbf16-zi" and res.perm is None
    check(res, q, z, scales, g_idx, 4, 128, False)


def test_gptq_static_groups_need_no_permutation():
    # desc_act with static groups keeps g_idx = k // group_size: nothing to permute.
    ckpt, q, z, scales, g_idx = make_checkpoint(192, 24, 4, 64, sym=False, version=1, act_order=False, seed=6)
    cfg = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 64,
        "desc_act": True,
        "sym": False,
        "checkpoint_format": "gptq",
    }
    res = gptq.convert_layer({f"m.{k}": v for k, v in ckpt.items()}, "m", cfg)
    assert res.perm is None
    check(res, q, z, scales, g_idx, 4, 64, False)


def test_gptq_convert_layer_reads_config_keys():
    ckpt, q, z, scales, g_idx = make_checkpoint(200, 72, 4, 64, sym=False, version=2, act_order=True, seed=7)
    tensors = {f"model.layers.0.mlp.up_proj.{k}": v for k, v in ckpt.items()}
    for cfg in (
        {"bits": 4, "group_size": 64, "sym": False, "desc_act": True, "checkpoint_format": "gptq_v2"},
        {"bits": 4, "group_size": 64, "sym": False, "desc_act": True, "format": "gptq_v2"},
    ):
        res = gptq.convert_layer(tensors, "model.layers.0.mlp.up_proj", cfg)
        assert res.perm is not None and res.source == "gptq_v2"
        check(res, q, z, scales, g_idx, 4, 64, False)


def test_gptq_one_group_of_non_power_of_two_size_is_per_channel():
    ckpt, q, z, scales, g_idx = make_checkpoint(96, 32, 4, 96, sym=False, version=2, act_order=False, seed=8)
    res = gptq.convert(
        ckpt["qweight"],
        ckpt["qzeros"],
        ckpt["scales"],
        ckpt["g_idx"],
        bits=4,
        group_size=96,
        checkpoint_format="gptq_v2",
    )
    assert str(res.weight.fmt) == "u4gc-sf16-zi"
    check(res, q, z, scales, g_idx, 4, 96, False)


# ---- errors ---------------------------------------------------------------------------------------


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def base(**kw):
    args = dict(K=200, N=72, bits=4, group_size=64, sym=False, version=1, act_order=False, seed=11)
    args.update(kw)
    return make_checkpoint(args.pop("K"), args.pop("N"), args.pop("bits"), args.pop("group_size"), **args)


def test_gptq_v1_zero_point_of_all_ones_is_refused():
    ckpt, q, z, scales, g_idx = base()
    stored = z - 1
    stored[1, 5] = 15  # v1: means a zero point of 16
    e = raises(
        r"layer 'blk\.0\.q': qzeros = .*group 1, output 5 stores 15.*zero point of 16",
        gptq.convert,
        ckpt["qweight"],
        pack_along_cols(stored, 4),
        scales,
        g_idx,
        bits=4,
        group_size=64,
        layer="blk.0.q",
    )
    assert e.layer == "blk.0.q" and e.field == "qzeros"
    # The same bits read as v2 are a valid zero point of 15.
    z2 = stored.clone()
    res = gptq.convert(
        ckpt["qweight"], pack_along_cols(z2, 4), scales, g_idx, bits=4, group_size=64, checkpoint_format="gptq_v2"
    )
    check(res, q, z2, scales, g_idx, 4, 64, False)


def test_gptq_sym_flag_checks_the_zero_points():
    ckpt, *_ = base(sym=False)
    raises(
        r"sym is set but group 0, output \d+ has zero point",
        gptq.convert,
        ckpt["qweight"],
        ckpt["qzeros"],
        ckpt["scales"],
        ckpt["g_idx"],
        bits=4,
        group_size=64,
        sym=True,
        layer="x",
    )
    # A v2 symmetric checkpoint (zeros stored as 8) read as v1 gets a hint.
    v2, *_ = base(sym=True, version=2)
    raises(
        r"a v2 checkpoint read as v1",
        gptq.convert,
        v2["qweight"],
        v2["qzeros"],
        v2["scales"],
        v2["g_idx"],
        bits=4,
        group_size=64,
        sym=True,
        layer="x",
    )


def test_gptq_unsupported_settings():
    ckpt, *_ = base()
    args = (ckpt["qweight"], ckpt["qzeros"], ckpt["scales"], ckpt["g_idx"])
    e = raises(
        r"layer 'L': bits = 5: GPTQ layers of 2, 3, 4, 8 bits", gptq.convert, *args, bits=5, group_size=64, layer="L"
    )
    assert (e.field, e.value) == ("bits", 5)
    raises(
        r"checkpoint_format = 'marlin'",
        gptq.convert,
        *args,
        bits=4,
        group_size=64,
        checkpoint_format="marlin",
        layer="L",
    )
    raises(
        r"checkpoint_format = 'gptq_p'",
        gptq.convert,
        *args,
        bits=4,
        group_size=64,
        checkpoint_format="gptq_p",
        layer="L",
    )
    raises(r"qweight.dtype = torch.int64", gptq.convert, ckpt["qweight"].long(), *args[1:], bits=4, group_size=64)
    raises(r"scales.dtype = torch.int32", gptq.convert, *args[:2], ckpt["scales"].int(), args[3], bits=4, group_size=64)
    raises(r"scales.shape = \[3, 72\]", gptq.convert, *args[:2], ckpt["scales"][:3], args[3], bits=4, group_size=64)
    raises(r"qweight.shape = \[24, 72\]", gptq.convert, ckpt["qweight"][:24], *args[1:], bits=4, group_size=64)
    raises(r"qzeros.shape", gptq.convert, ckpt["qweight"], ckpt["qzeros"][:, :8], *args[2:], bits=4, group_size=64)


def test_gptq_group_size_the_format_cannot_hold():
    ckpt, *_ = make_checkpoint(200, 16, 4, 40, sym=False, version=2, act_order=False, seed=12)
    e = raises(
        r"group_size = 40: the unified format cannot represent it",
        gptq.convert,
        ckpt["qweight"],
        ckpt["qzeros"],
        ckpt["scales"],
        ckpt["g_idx"],
        bits=4,
        group_size=40,
        checkpoint_format="gptq_v2",
        layer="L",
    )
    assert e.field == "group_size"


def test_gptq_act_order_groupings_that_cannot_be_exact():
    ckpt, q, z, scales, g_idx = base(act_order=True)
    bad = g_idx.clone()
    k0 = int((bad == 0).nonzero()[0])
    bad[k0] = 1  # group 0 now has 63 inputs, group 1 has 65
    e = raises(
        r"g_idx = tensor of shape \[200\].*group 0 has 63 inputs where 64 are needed",
        gptq.convert,
        ckpt["qweight"],
        ckpt["qzeros"],
        scales,
        bad,
        bits=4,
        group_size=64,
        layer="L",
    )
    assert e.field == "g_idx"
    out = g_idx.clone()
    out[3] = 4  # only 4 groups (0..3)
    raises(
        r"holds group 4, outside 0..3",
        gptq.convert,
        ckpt["qweight"],
        ckpt["qzeros"],
        scales,
        out,
        bits=4,
        group_size=64,
    )
    raises(
        r"g_idx.dtype = torch.float32",
        gptq.convert,
        ckpt["qweight"],
        ckpt["qzeros"],
        scales,
        g_idx.float(),
        bits=4,
        group_size=64,
    )


def test_gptq_convert_layer_errors():
    ckpt, *_ = base(act_order=True)
    cfg = {"bits": 4, "group_size": 64, "sym": False, "desc_act": True}
    tensors = {f"p.{k}": v for k, v in ckpt.items() if k != "g_idx"}
    raises(r"layer 'p': p.g_idx = None: desc_act is set", gptq.convert_layer, tensors, "p", cfg)
    del tensors["p.qzeros"]
    raises(
        r"layer 'p': p.qzeros = None: the tensor is missing",
        gptq.convert_layer,
        tensors,
        "p",
        dict(cfg, desc_act=False),
    )
    raises(r"quant_method = 'awq'", gptq.convert_layer, tensors, "p", dict(cfg, quant_method="awq"))
    raises(
        r"checkpoint_format = 'gptq': disagrees with format = 'gptq_v2'",
        gptq.convert_layer,
        tensors,
        "p",
        dict(cfg, checkpoint_format="gptq", format="gptq_v2"),
    )
