"""compressed-tensors pack-quantized importer (humming_aot.convert.compressed_tensors) against
synthetic checkpoints.

The packer here follows compressed-tensors' published pack-quantized layout (``pack_to_int32``):
signed quantized values plus 2**(b-1), 32 // b of them per int32 LSB first, never straddling a word,
weights packed along K ([N, ceil(K/p)]) and asymmetric group/channel zero points along N
([ceil(N/p), G]); tensor/block zero points unpacked, signed. It works on Python integers, apart from
the importer. The imported weight must hold the codes, scales and zero points exactly and
dequantize to ``scale * (q - zp)`` (signed q, zp) computed here in float32.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, compressed_tensors as ct


def to_int32(u: int) -> int:
    return u - (1 << 32) if u >= 1 << 31 else u


def pack_rows(signed: torch.Tensor, bits: int) -> torch.Tensor:
    """[R, C] signed values -> int32 [R, ceil(C / p)], p = 32 // bits, LSB first, with the offset."""
    p = 32 // bits
    R_, C = signed.shape
    off = 1 << (bits - 1)
    out = []
    for r in range(R_):
        row = []
        for j in range(-(-C // p)):
            word = 0
            for i in range(p):
                c = j * p + i
                if c < C:
                    u = int(signed[r, c]) + off
                    assert 0 <= u < (1 << bits)
                    word |= u << (bits * i)
            row.append(to_int32(word))
        out.append(row)
    return torch.tensor(out, dtype=torch.int32)


def rand_signed(shape, bits, g):
    return torch.randint(-(1 << (bits - 1)), 1 << (bits - 1), shape, generator=g)


def make(
    N, K, bits, strategy, *, symmetric, group_size=None, block=None, actorder=False, seed=0, scale_dtype=torch.bfloat16
):
    """Signed codes q [N, K], per-element scale / zero maps and the checkpoint tensors."""
    g = torch.Generator().manual_seed(seed)
    q = rand_signed((N, K), bits, g)
    if strategy == "group":
        G = -(-K // group_size)
        sshape = (N, G)
    elif strategy == "channel":
        sshape = (N, 1)
    elif strategy == "tensor":
        sshape = (1,)
    else:
        sshape = (-(-N // block[0]), -(-K // block[1]))
    scale = ((torch.rand(sshape, generator=g) + 0.05) * 0.02).to(scale_dtype)
    zp = None if symmetric else rand_signed(sshape, bits, g)
    if zp is not None and zp.dim() == 2:
        zp[0, 0], zp[-1, -1] = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    # group of each (n, k), by index arithmetic
    gidx = None
    if strategy == "group":
        if actorder:
            gidx = (torch.randperm(K, generator=g) // group_size).to(torch.int32)
            col_group = gidx.long()
        else:
            col_group = torch.arange(K) // group_size
        rows, cols = torch.arange(N)[:, None].expand(N, K), col_group[None, :].expand(N, K)
    elif strategy == "channel":
        rows, cols = torch.arange(N)[:, None].expand(N, K), torch.zeros(N, K, dtype=torch.long)
    elif strategy == "tensor":
        rows = cols = None
    else:
        rows = (torch.arange(N) // block[0])[:, None].expand(N, K)
        cols = (torch.arange(K) // block[1])[None, :].expand(N, K)
    if rows is None:
        s_el = scale.float().reshape(()).expand(N, K)
        z_el = torch.zeros(N, K) if zp is None else zp.float().reshape(()).expand(N, K)
    else:
        s_el = scale.float()[rows, cols]
        z_el = torch.zeros(N, K) if zp is None else zp.float()[rows, cols]
    expected = s_el * (q.float() - z_el)
    tensors = {"weight_packed": pack_rows(q, bits), "weight_scale": scale, "weight_shape": torch.tensor([N, K])}
    if zp is not None:
        if strategy in ("group", "channel"):
            tensors["weight_zero_point"] = pack_rows(zp.t(), bits).t().contiguous()
        else:
            tensors["weight_zero_point"] = zp.to(torch.int8)
    if gidx is not None:
        tensors["weight_g_idx"] = gidx
    args = {
        "num_bits": bits,
        "type": "int",
        "symmetric": symmetric,
        "strategy": strategy,
        "group_size": group_size,
        "block_structure": block,
        "dynamic": False,
        "actorder": "group" if actorder else None,
    }
    return tensors, args, q, scale, zp, expected, gidx


CASES = [
    # N, K, bits, strategy, symmetric, group_size, block, actorder
    (72, 224, 4, "group", True, 32, None, False),
    (72, 224, 4, "group", False, 32, None, False),
    (72, 224, 4, "group", False, 32, None, True),
    (40, 192, 4, "group", True, 64, None, True),
    (70, 100, 8, "channel", True, None, None, False),
    (70, 100, 8, "channel", False, None, None, False),
    (30, 160, 3, "group", False, 32, None, False),  # 10 codes per word, top 2 bits unused
    (24, 96, 2, "group", True, 16, None, True),
    (36, 50, 4, "tensor", True, None, None, False),
    (36, 50, 8, "tensor", False, None, None, False),
    (48, 96, 8, "block", True, None, [16, 32], False),
    (40, 80, 4, "block", False, None, [16, 32], False),  # partial blocks at both ends
]


@pytest.mark.parametrize("N,K,bits,strategy,symmetric,group_size,block,actorder", CASES)
def test_pack_quantized_roundtrip(N, K, bits, strategy, symmetric, group_size, block, actorder):
    tensors, args, q, scale, zp, expected, gidx = make(
        N,
        K,
        bits,
        strategy,
        symmetric=symmetric,
        group_size=group_size,
        block=block,
        actorder=actorder,
        seed=N * K + bits,
    )
    scheme = {"targets": ["Linear"], "weights": args, "format": "pack-quantized"}
    res = ct.convert_layer(
        {f"model.layers.1.mlp.down_proj.{k}": v for k, v in tensors.items()}, "model.layers.1.mlp.down_proj", scheme
    )
    w = res.weight
    mid = 1 << (bits - 1)
    gran = {"group": f"g{group_size}", "channel": "gc", "tensor": "gc"}.get(strategy) or f"g{block[1]}n{block[0]}"
    assert str(w.fmt) == f"u{bits}{gran}-sbf16" + ("" if symmetric else "-zi")
    assert (res.perm is not None) == actorder
    perm = torch.arange(K) if res.perm is None else res.perm
    if actorder:
        assert torch.equal(torch.sort(perm).values, torch.arange(K))
        assert torch.equal(gidx.long()[perm], torch.arange(K) // group_size)
    assert torch.equal(w.codes, (q + mid)[:, perm].to(torch.uint8))
    if strategy == "tensor":
        assert torch.equal(w.scales, scale.reshape(1, 1).expand(N, 1))
    else:
        assert torch.equal(w.scales, scale)
    if symmetric:
        assert w.zeros is None
    else:
        want_z = (zp + mid).to(torch.uint8)
        assert torch.equal(w.zeros, want_z.reshape(1, 1).expand(N, 1) if strategy == "tensor" else want_z)
    got = R.dequantize_weight(w)
    assert torch.equal(got, expected[:, perm])
    x = torch.randn(2, K, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(
        x.index_select(-1, perm) @ got.double().t(), x @ expected.double().t(), rtol=1e-12, atol=1e-12
    )


def test_pack_quantized_strategy_inferred_and_unset_g_idx():
    # No strategy: group_size > 0 means group; a g_idx of -1 entries means column order.
    tensors, args, q, scale, zp, expected, _ = make(16, 64, 4, "group", symmetric=False, group_size=32, seed=3)
    args = {"num_bits": 4, "symmetric": False, "group_size": 32}
    res = ct.convert(
        tensors["weight_packed"],
        tensors["weight_scale"],
        args=args,
        weight_shape=tensors["weight_shape"],
        weight_zero_point=tensors["weight_zero_point"],
        weight_g_idx=torch.full((64,), -1, dtype=torch.int32),
    )
    assert str(res.weight.fmt) == "u4g32-sbf16-zi" and res.perm is None
    assert torch.equal(R.dequantize_weight(res.weight), expected)


def test_pack_quantized_fp16_scales_and_list_shape():
    tensors, args, q, scale, zp, expected, _ = make(
        24, 128, 4, "group", symmetric=True, group_size=128, seed=4, scale_dtype=torch.float16
    )
    res = ct.convert(tensors["weight_packed"], tensors["weight_scale"], args=args, weight_shape=[24, 128])
    assert str(res.weight.fmt) == "u4g128-sf16"
    assert torch.equal(R.dequantize_weight(res.weight), expected)


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_pack_quantized_errors():
    tensors, args, *_ = make(16, 64, 4, "group", symmetric=False, group_size=32, seed=5)
    wp, ws, shape, zpt = (tensors[k] for k in ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point"))
    kw = dict(weight_shape=shape, weight_zero_point=zpt, layer="L")
    e = raises(
        r"layer 'L': format = 'float-quantized'",
        ct.convert,
        wp,
        ws,
        args=args,
        compression_format="float-quantized",
        **kw,
    )
    assert (e.field, e.value) == ("format", "float-quantized")
    raises(r"weights.type = 'float'", ct.convert, wp, ws, args=dict(args, type="float"), **kw)
    raises(r"weights.strategy = 'tensor_group'", ct.convert, wp, ws, args=dict(args, strategy="tensor_group"), **kw)
    raises(r"weights.dynamic = True", ct.convert, wp, ws, args=dict(args, dynamic=True), **kw)
    raises(r"weights.num_bits = 16", ct.convert, wp, ws, args=dict(args, num_bits=16), **kw)
    raises(
        r"weight_zero_point = None: the scheme is asymmetric",
        ct.convert,
        wp,
        ws,
        args=args,
        weight_shape=shape,
        layer="L",
    )
    raises(r"weight_shape = None", ct.convert, wp, ws, args=args, weight_zero_point=zpt, layer="L")
    raises(
        r"weight_packed.shape = \[16, 8\]: expected \[16, 9\]",
        ct.convert,
        wp,
        ws,
        args=args,
        weight_shape=[16, 72],
        weight_zero_point=zpt,
        layer="L",
    )
    raises(
        r"weights.group_size = 24",
        ct.convert,
        wp[:, :6],
        ws,
        args=dict(args, group_size=24),
        weight_shape=[16, 48],
        weight_zero_point=zpt,
    )
    raises(r"weight_zero_point.shape", ct.convert, wp, ws, args=args, weight_shape=shape, weight_zero_point=zpt[:, :1])
    raises(
        r"the scheme is symmetric but the stored zero points are not all 0",
        ct.convert,
        wp,
        ws,
        args=dict(args, symmetric=True),
        **kw,
    )
    raises(
        r"weight_g_idx = .*group 0 has 31 inputs where 32 are needed",
        ct.convert,
        wp,
        ws,
        args=args,
        weight_g_idx=torch.tensor([1] + [0] * 31 + [1] * 32, dtype=torch.int32),
        **kw,
    )
    raises(
        r"weight_g_idx = None: actorder = 'group' reorders the groups",
        ct.convert,
        wp,
        ws,
        args=dict(args, actorder="group"),
        **kw,
    )
    # block sizes the format cannot hold, and an out-of-range unpacked zero point
    bt, bargs, *_ = make(48, 96, 8, "block", symmetric=True, block=[16, 32], seed=6)
    raises(
        r"weights.block_structure = \[24, 32\]",
        ct.convert,
        bt["weight_packed"],
        torch.ones(2, 3, dtype=torch.bfloat16),
        args=dict(bargs, block_structure=[24, 32]),
        weight_shape=bt["weight_shape"],
    )
    tt, targs, *_ = make(8, 32, 4, "tensor", symmetric=False, seed=7)
    raises(
        r"weight_zero_point = 9 \(torch.int8\): holds 9, outside the signed 4-bit range -8..7",
        ct.convert,
        tt["weight_packed"],
        tt["weight_scale"],
        args=targs,
        weight_shape=tt["weight_shape"],
        weight_zero_point=torch.tensor([9], dtype=torch.int8),
    )
    raises(
        r"layer 'p': p.weight_scale = None: the tensor is missing",
        ct.convert_layer,
        {"p.weight_packed": wp, "p.weight_shape": shape},
        "p",
        {"weights": args},
    )
