"""compressed-tensors float-quantized / int-quantized / nvfp4-pack-quantized / mxfp4-pack-quantized
importer (humming_aot.convert.compressed_tensors_fp, reached through compressed_tensors.convert_layer)
against synthetic checkpoints.

Conventions, from compressed-tensors' sources (``compressors/quantized_compressors/
naive_quantized.py`` and ``fp4_quantized.py``, ``quantization/lifecycle/forward.py``):

* unpacked: ``weight`` in the quantized dtype, value ``(x_q - zero_point) * scale``; block strategies
  may pad the weight and record ``weight_shape_original``;
* FP4: ``weight_packed`` uint8 [N, K/2] with element 2j in the low nibble and 2j+1 in the high nibble
  (``pack_fp4_to_uint8``); NVFP4 value ``e2m1 * weight_scale / weight_global_scale`` (the global scale
  divides), MXFP4 value ``e2m1 * 2**(weight_scale - 127)``.

The packers below work on Python integers; expected weights are the formulas above in float64.
"""

import math

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, compressed_tensors as ct, compressed_tensors_fp as ctfp

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    rows = []
    for r in codes.tolist():
        rows.append([r[2 * j] | (r[2 * j + 1] << 4) for j in range(len(r) // 2)])
    return torch.tensor(rows, dtype=torch.uint8)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    return torch.tensor([[E2M1[c] for c in row] for row in codes.tolist()], dtype=torch.float64)


def rand_fp8_bytes(shape, g, positive=False):
    b = torch.randint(0, 128 if positive else 256, shape, generator=g, dtype=torch.int64)
    b[(b & 0x7F) == 0x7F] = 0x38
    if positive:
        b[b == 0] = 0x30
    return b.to(torch.uint8)


def layer_dict(prefix, tensors):
    return {f"{prefix}.{k}": v for k, v in tensors.items()}


# ---- FP8 / int8 (unpacked) ----------------------------------------------------------------------


def expand(scale, strategy, N, K, group_size=None, block=None):
    if strategy == "tensor":
        return scale.double().reshape(()).expand(N, K)
    if strategy == "channel":
        return scale.double().reshape(N, 1).expand(N, K)
    if strategy == "group":
        return scale.double()[:, torch.arange(K) // group_size]
    return scale.double()[torch.arange(N)[:, None] // block[0], torch.arange(K)[None, :] // block[1]]


@pytest.mark.parametrize(
    "N,K,strategy,group_size,block,scale_dtype",
    [
        (48, 80, "channel", None, None, torch.float32),
        (48, 80, "channel", None, None, torch.bfloat16),
        (30, 70, "tensor", None, None, torch.float32),
        (64, 96, "group", 32, None, torch.bfloat16),
        (256, 384, "block", None, [128, 128], torch.float32),
        (72, 100, "block", None, [32, 64], torch.bfloat16),  # partial blocks
    ],
)
def test_float_quantized_fp8(N, K, strategy, group_size, block, scale_dtype):
    g = torch.Generator().manual_seed(N * K)
    raw = rand_fp8_bytes((N, K), g)
    weight = raw.view(torch.float8_e4m3fn)
    sshape = {
        "channel": (N, 1),
        "tensor": (1,),
        "group": (N, -(-K // (group_size or 1))),
        "block": (-(-N // block[0]), -(-K // block[1])) if block else None,
    }[strategy]
    scale = (torch.rand(sshape, generator=g) * 0.01 + 1e-4).to(scale_dtype)
    args = {
        "num_bits": 8,
        "type": "float",
        "symmetric": True,
        "strategy": strategy,
        "group_size": group_size,
        "block_structure": block,
        "dynamic": False,
    }
    scheme = {"targets": ["Linear"], "weights": args, "format": "float-quantized"}
    p = "model.layers.2.mlp.up_proj"
    res = ct.convert_layer(layer_dict(p, {"weight": weight, "weight_scale": scale}), p, scheme)
    w = res.weight
    st = {torch.float32: "f32", torch.bfloat16: "bf16"}[scale_dtype]
    gran = {"channel": "gc", "tensor": "gc", "group": f"g{group_size}"}.get(strategy) or f"g{block[1]}n{block[0]}"
    assert str(w.fmt) == f"e4m3{gran}-s{st}" and res.source == "compressed_tensors_float-quantized"
    assert torch.equal(w.codes, raw)
    if strategy == "tensor":
        assert torch.equal(w.scales, scale.reshape(1, 1).expand(N, 1))
    else:
        assert torch.equal(w.scales, scale)
    expected = (weight.double() * expand(scale, strategy, N, K, group_size, block)).float()
    assert torch.equal(R.dequantize_weight(w), expected)


def test_float_quantized_block_padding_is_cut():
    # Newer compressed-tensors pad block-quantized weights to whole blocks and store the original shape.
    g = torch.Generator().manual_seed(5)
    N, K = 200, 300
    raw = rand_fp8_bytes((256, 384), g)
    scale = torch.rand(2, 3, generator=g) * 0.01 + 1e-4
    args = {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}
    res = ctfp.convert_unpacked(
        raw.view(torch.float8_e4m3fn), scale, args=args, weight_shape_original=torch.tensor([N, K])
    )
    assert res.weight.shape == (N, K) and torch.equal(res.weight.codes, raw[:N, :K])
    expected = (raw[:N, :K].view(torch.float8_e4m3fn).double() * expand(scale, "block", N, K, block=[128, 128])).float()
    assert torch.equal(R.dequantize_weight(res.weight), expected)


def test_int_quantized_symmetric_and_asymmetric():
    g = torch.Generator().manual_seed(6)
    N, K = 20, 48
    q = torch.randint(-128, 128, (N, K), generator=g)
    scale = (torch.rand(N, 1, generator=g) * 0.01 + 1e-4).to(torch.bfloat16)
    args = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    res = ctfp.convert_unpacked(q.to(torch.int8), scale, args=args, compression_format="int-quantized")
    assert str(res.weight.fmt) == "i8gc-sbf16"
    assert torch.equal(res.weight.codes, torch.tensor([[v & 0xFF for v in r] for r in q.tolist()], dtype=torch.uint8))
    assert torch.equal(R.dequantize_weight(res.weight), (q.double() * scale.double()).float())
    # asymmetric, tensor strategy, signed zero point
    zp = torch.tensor([-7], dtype=torch.int8)
    args = {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "tensor"}
    s1 = torch.tensor([0.02], dtype=torch.float32)
    res = ctfp.convert_unpacked(
        q.to(torch.int8), s1, args=args, weight_zero_point=zp, compression_format="int-quantized"
    )
    assert str(res.weight.fmt) == "u8gc-sf32-zi"
    assert torch.equal(res.weight.codes, (q + 128).to(torch.uint8))
    assert torch.equal(res.weight.zeros, torch.full((N, 1), 121, dtype=torch.uint8))
    assert torch.equal(R.dequantize_weight(res.weight), ((q.double() + 7) * s1.double()).float())


# ---- NVFP4 / MXFP4 ------------------------------------------------------------------------------


def make_fp4(N, K, gs, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (N, K), generator=g, dtype=torch.int64)
    codes[0, :16] = torch.arange(16)
    return codes.to(torch.uint8), pack_fp4(codes), g


@pytest.mark.parametrize("N,K,gscale", [(32, 64, 448.0 * 6 / 3.7), (24, 48, 64.0), (8, 16, 3.0)])
def test_nvfp4_pack_quantized(N, K, gscale):
    codes, packed, g = make_fp4(N, K, 16, seed=N + K)
    sbytes = rand_fp8_bytes((N, K // 16), g, positive=True)
    scale = sbytes.view(torch.float8_e4m3fn)
    gs = torch.tensor([gscale], dtype=torch.float32)
    args = {
        "num_bits": 4,
        "type": "float",
        "symmetric": True,
        "strategy": "tensor_group",
        "group_size": 16,
        "dynamic": False,
    }
    p = "model.layers.0.self_attn.q_proj"
    res = ct.convert_layer(
        layer_dict(p, {"weight_packed": packed, "weight_scale": scale, "weight_global_scale": gs}),
        p,
        {"weights": args, "format": "nvfp4-pack-quantized"},
    )
    w = res.weight
    assert str(w.fmt) == "e2m1g16-se4m3-gs"
    assert torch.equal(w.codes, codes)
    assert torch.equal(w.scales.view(torch.uint8), sbytes)
    # the divisor is stored as its float32 reciprocal, rounded once
    assert float(w.global_scale) == float(torch.tensor(1.0 / gs.double().item(), dtype=torch.float32))
    exact = e2m1_values(codes) * scale.double()[:, torch.arange(K) // 16] / gs.double()
    got = R.dequantize_weight(w)
    if math.frexp(gscale)[0] == 0.5:  # a power of two: the reciprocal is exact, so is everything
        assert torch.equal(got, exact.float())
    else:
        torch.testing.assert_close(got.double(), exact, rtol=2.0**-22, atol=0)
        assert not torch.equal(got, torch.zeros_like(got))


def test_mxfp4_pack_quantized():
    N, K = 40, 96
    codes, packed, g = make_fp4(N, K, 32, seed=7)
    sb = torch.randint(110, 140, (N, K // 32), generator=g, dtype=torch.int64).to(torch.uint8)
    res = ctfp.convert_layer(
        {"m.weight_packed": packed, "m.weight_scale": sb},
        "m",
        {
            "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32},
            "format": "mxfp4-pack-quantized",
        },
    )
    w = res.weight
    assert str(w.fmt) == "e2m1g32-se8m0" and torch.equal(w.codes, codes) and torch.equal(w.scales, sb)
    exact = e2m1_values(codes) * torch.exp2(sb.double() - 127)[:, torch.arange(K) // 32]
    assert torch.equal(R.dequantize_weight(w), exact.float())


def test_fp4_nibble_order_by_hand():
    # byte 0x21: element 0 = code 1 (0.5), element 1 = code 2 (1.0)
    res = ctfp.convert_fp4(
        torch.tensor([[0x21] * 8], dtype=torch.uint8),
        torch.tensor([[1.0]]).to(torch.float8_e4m3fn),
        torch.tensor([1.0]),
    )
    assert res.weight.codes[0, :2].tolist() == [1, 2]


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_compressed_tensors_fp_errors():
    codes, packed, g = make_fp4(16, 32, 16, seed=9)
    sc = torch.ones(16, 2).to(torch.float8_e4m3fn)
    gs = torch.tensor([2.0])
    raises(
        r"layer 'L': weight_global_scale = None: NVFP4 needs its global scale", ctfp.convert_fp4, packed, sc, layer="L"
    )
    raises(r"weight_scale.shape = \[16, 1\]: expected \[16, 2\]", ctfp.convert_fp4, packed, sc[:, :1], gs)
    raises(r"weight_scale.dtype = torch.float32", ctfp.convert_fp4, packed, sc.float(), gs)
    raises(r"weight_global_scale = 0.0", ctfp.convert_fp4, packed, sc, torch.tensor([0.0]))
    raises(
        r"weights.group_size = 32: nvfp4-pack-quantized has groups of 16",
        ctfp.convert_fp4,
        packed,
        sc,
        gs,
        args={"num_bits": 4, "type": "float", "group_size": 32},
    )
    raises(
        r"weight_global_scale = .*MXFP4 has no global scale",
        ctfp.convert_fp4,
        packed,
        torch.full((16, 1), 127, dtype=torch.uint8),
        gs,
        compression_format="mxfp4-pack-quantized",
    )
    raises(r"format = 'marlin-24'", ctfp.convert_layer, {}, "p", {"weights": {}, "format": "marlin-24"})
    w8 = torch.zeros(8, 32).to(torch.float8_e4m3fn)
    fargs = {"num_bits": 8, "type": "float", "strategy": "channel"}
    raises(
        r"weight_zero_point = .*FP8 weights are symmetric",
        ctfp.convert_unpacked,
        w8,
        torch.ones(8, 1),
        args=fargs,
        weight_zero_point=torch.ones(8, 1, dtype=torch.int8),
    )
    raises(
        r"weights.strategy = 'token'", ctfp.convert_unpacked, w8, torch.ones(8, 1), args=dict(fargs, strategy="token")
    )
    raises(r"weights.dynamic = True", ctfp.convert_unpacked, w8, torch.ones(8, 1), args=dict(fargs, dynamic=True))
    raises(r"weights.num_bits = 4", ctfp.convert_unpacked, w8, torch.ones(8, 1), args=dict(fargs, num_bits=4))
    raises(
        r"weight.dtype = torch.int8: expected float8_e4m3fn",
        ctfp.convert_unpacked,
        torch.zeros(8, 32, dtype=torch.int8),
        torch.ones(8, 1),
        args=fargs,
    )
    raises(r"weight_scale.shape = \[8, 2\]: expected \[8, 1\]", ctfp.convert_unpacked, w8, torch.ones(8, 2), args=fargs)
    raises(
        r"weights.block_structure = \[96, 128\]",
        ctfp.convert_unpacked,
        w8,
        torch.ones(1, 1),
        args=dict(fargs, strategy="block", block_structure=[96, 128]),
    )
    raises(
        r"weight_zero_point = None: the scheme is asymmetric",
        ctfp.convert_unpacked,
        torch.zeros(8, 32, dtype=torch.int8),
        torch.ones(8, 1),
        args={"num_bits": 8, "type": "int", "symmetric": False, "strategy": "channel"},
    )
    raises(
        r"p.weight_scale = None: the tensor is missing",
        ct.convert_layer,
        {"p.weight": w8},
        "p",
        {"weights": fargs, "format": "float-quantized"},
    )
