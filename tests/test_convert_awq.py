"""AWQ importer (humming_aot.convert.awq) against synthetic checkpoints.

The packer here follows AutoAWQ's published GEMM layout (``WQLinear_GEMM.from_linear``): for input
row k and word c, the nibble at bits 4i..4i+3 holds output 8c + (0, 2, 4, 6, 1, 3, 5, 7)[i]; the zero
points [G, N/8] are packed the same way and stored as they are. It is written on Python integers,
separately from the importer. The imported weight must hold the original codes, scales and zero
points exactly and dequantize to ``scale * (q - z)`` computed here in float32.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, awq

NIBBLE_HOLDS = (0, 2, 4, 6, 1, 3, 5, 7)  # output (within the word's 8) stored in nibble i


def to_int32(u: int) -> int:
    return u - (1 << 32) if u >= 1 << 31 else u


def awq_pack(values: torch.Tensor) -> torch.Tensor:
    """[R, N] 4-bit values -> int32 [R, N/8] in AWQ GEMM order."""
    R_, N = values.shape
    assert N % 8 == 0
    out = []
    for r in range(R_):
        row = []
        for c in range(N // 8):
            word = 0
            for i in range(8):
                v = int(values[r, 8 * c + NIBBLE_HOLDS[i]])
                assert 0 <= v < 16
                word |= v << (4 * i)
            row.append(to_int32(word))
        out.append(row)
    return torch.tensor(out, dtype=torch.int32)


def make_checkpoint(K, N, group_size, seed, scale_dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    gs = K if group_size == -1 else group_size
    G = -(-K // gs)
    q = torch.randint(0, 16, (K, N), generator=g)
    z = torch.randint(0, 16, (G, N), generator=g)
    z[0, 0], z[-1, -1] = 0, 15
    scales = ((torch.rand(G, N, generator=g) + 0.05) * 0.02).to(scale_dtype)
    return {"qweight": awq_pack(q), "qzeros": awq_pack(z), "scales": scales}, q, z, scales


def expected_weight(q, z, scales, group_size):
    K = q.shape[0]
    gs = K if group_size == -1 else group_size
    gi = torch.arange(K) // gs
    return (scales.float()[gi] * (q.float() - z.float()[gi])).t()


def test_awq_nibble_order_by_hand():
    # Nibble i holds the value i: outputs 0..7 read nibbles 0, 4, 1, 5, 2, 6, 3, 7.
    word = torch.tensor([[to_int32(0x76543210)]] * 8, dtype=torch.int32)  # K = 8 rows
    res = awq.convert(
        word,
        torch.tensor([[to_int32(0x76543210)]], dtype=torch.int32),
        torch.ones(1, 8, dtype=torch.float16),
        group_size=8,
    )
    assert res.weight.codes[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert res.weight.zeros[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


@pytest.mark.parametrize(
    "K,N,group_size,scale_dtype",
    [
        (192, 72, 64, torch.float16),
        (200, 40, 64, torch.float16),  # K not a multiple of the group size: partial last group
        (96, 24, 32, torch.bfloat16),
        (136, 56, -1, torch.float16),  # per channel
        (128, 8, 128, torch.float16),
    ],
)
def test_awq_roundtrip(K, N, group_size, scale_dtype):
    ckpt, q, z, scales = make_checkpoint(K, N, group_size, seed=K + N, scale_dtype=scale_dtype)
    res = awq.convert(ckpt["qweight"], ckpt["qzeros"], ckpt["scales"], group_size=group_size, layer="l")
    w = res.weight
    gran = "gc" if group_size == -1 else f"g{group_size}"
    st = {torch.float16: "f16", torch.bfloat16: "bf16"}[scale_dtype]
    assert str(w.fmt) == f"u4{gran}-s{st}-zi" and res.perm is None and res.source == "awq_gemm"
    assert torch.equal(w.codes, q.t().to(torch.uint8))
    assert torch.equal(w.zeros, z.t().to(torch.uint8))
    assert w.scales.dtype == scale_dtype and torch.equal(w.scales, scales.t())
    assert torch.equal(R.dequantize_weight(w), expected_weight(q, z, scales, group_size))


def test_awq_convert_layer_both_config_spellings():
    ckpt, q, z, scales = make_checkpoint(256, 48, 128, seed=9)
    tensors = {f"model.layers.3.self_attn.o_proj.{k}": v for k, v in ckpt.items()}
    for cfg in (
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
        {"w_bit": 4, "q_group_size": 128, "zero_point": True, "version": "GEMM"},
    ):
        res = awq.convert_layer(tensors, "model.layers.3.self_attn.o_proj", cfg)
        assert torch.equal(R.dequantize_weight(res.weight), expected_weight(q, z, scales, 128))


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_awq_errors():
    ckpt, q, z, scales = make_checkpoint(128, 16, 64, seed=10)
    qw, qz, sc = ckpt["qweight"], ckpt["qzeros"], ckpt["scales"]
    e = raises(
        r"layer 'L': bits = 8: AWQ GEMM checkpoints are 4-bit",
        awq.convert,
        qw,
        qz,
        sc,
        group_size=64,
        bits=8,
        layer="L",
    )
    assert (e.layer, e.field, e.value) == ("L", "bits", 8)
    raises(r"layer 'L': version = 'gemv'", awq.convert, qw, qz, sc, group_size=64, version="gemv", layer="L")
    raises(r"qweight.shape = \[128, 1\]", awq.convert, qw[:, :1], qz, sc, group_size=64)
    raises(
        r"scales.shape = \[2, 12\]: N = 12 outputs is not a multiple of 8",
        awq.convert,
        qw,
        qz,
        sc[:, :12],
        group_size=64,
    )
    raises(r"scales.shape = \[2, 16\]", awq.convert, qw, qz, sc, group_size=32)
    raises(r"qzeros.dtype = torch.int64", awq.convert, qw, qz.long(), sc, group_size=64)
    raises(r"group_size = 48", awq.convert, qw[:96], qz, sc, group_size=48)
    tensors = {"m.qweight": qw, "m.scales": sc}
    raises(r"m.qzeros = None: the tensor is missing", awq.convert_layer, tensors, "m", {"bits": 4, "group_size": 64})
    tensors["m.qzeros"] = qz
    raises(r"zero_point = False", awq.convert_layer, tensors, "m", {"bits": 4, "group_size": 64, "zero_point": False})
    raises(r"quant_method = 'gptq'", awq.convert_layer, tensors, "m", {"quant_method": "gptq", "group_size": 64})
