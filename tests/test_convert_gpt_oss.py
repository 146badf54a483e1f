"""gpt-oss MXFP4 importer (humming_aot.convert.gpt_oss) against synthetic checkpoints.

Convention from openai/gpt-oss ``gpt_oss/torch/weights.py`` (``_get_mxfp4_tensor``): ``blocks`` uint8
[..., N, G, 16], input 32g + 2j of output n in the low nibble of byte j of group g and 32g + 2j + 1 in
the high nibble; ``scales`` uint8 [..., N, G], value ``ldexp(FP4_VALUES[nibble], scale - 127)``.
The packer works on Python integers; expected weights are that formula in float64.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, gpt_oss

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def pack_blocks(codes):
    """[N, K] nibbles -> [N, K / 32, 16] bytes."""
    N, K = codes.shape
    out = []
    for row in codes.tolist():
        out.append(
            [[row[32 * gi + 2 * j] | (row[32 * gi + 2 * j + 1] << 4) for j in range(16)] for gi in range(K // 32)]
        )
    return torch.tensor(out, dtype=torch.uint8)


def make(E, N, K, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (E, N, K), generator=g, dtype=torch.int64)
    scales = torch.randint(100, 150, (E, N, K // 32), generator=g, dtype=torch.int64)
    scales[0, 0, 0], scales[-1, -1, -1] = 0, 254
    blocks = torch.stack([pack_blocks(codes[e]) for e in range(E)])
    expected = []
    for e in range(E):
        vals = torch.tensor([[FP4_VALUES[c] for c in r] for r in codes[e].tolist()], dtype=torch.float64)
        expected.append((vals * torch.exp2(scales[e].double() - 127)[:, torch.arange(K) // 32]).float())
    return blocks, scales.to(torch.uint8), codes.to(torch.uint8), expected


def test_gpt_oss_experts_hf_names():
    E, N, K = 3, 20, 64
    blocks, scales, codes, expected = make(E, N, K, seed=1)
    p = "model.layers.0.mlp.experts.gate_up_proj"
    out = gpt_oss.convert_layer({f"{p}_blocks": blocks, f"{p}_scales": scales}, p, {"quant_method": "mxfp4"})
    assert isinstance(out, list) and len(out) == E
    for e, res in enumerate(out):
        w = res.weight
        assert str(w.fmt) == "e2m1g32-se8m0" and w.shape == (N, K) and res.source == "gpt_oss_mxfp4"
        assert torch.equal(w.codes, codes[e]) and torch.equal(w.scales, scales[e])
        assert torch.equal(R.dequantize_weight(w), expected[e])


def test_gpt_oss_single_original_names():
    blocks, scales, codes, expected = make(1, 16, 96, seed=2)
    p = "block.3.mlp.mlp2_weight"
    res = gpt_oss.convert_layer({f"{p}.blocks": blocks[0], f"{p}.scales": scales[0]}, p)
    assert torch.equal(res.weight.codes, codes[0])
    assert torch.equal(R.dequantize_weight(res.weight), expected[0])


def test_gpt_oss_nibble_order_by_hand():
    # byte 0x5C: input 0 = code 0xC (-2.0), input 1 = code 5 (3.0); scale byte 128 doubles them
    res = gpt_oss.convert(torch.full((1, 1, 16), 0x5C, dtype=torch.uint8), torch.full((1, 1), 128, dtype=torch.uint8))
    assert R.dequantize_weight(res.weight)[0, :2].tolist() == [-4.0, 6.0]


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_gpt_oss_errors():
    blocks, scales, *_ = make(2, 8, 64, seed=3)
    raises(
        r"layer 'L': scales.shape = \[2, 8, 1\]: expected \[2, 8, 2\]",
        gpt_oss.convert,
        blocks,
        scales[..., :1],
        layer="L",
    )
    raises(r"blocks.shape = \[2, 8, 2, 8\]", gpt_oss.convert, blocks[..., :8], scales)
    raises(r"blocks.dtype = torch.int32", gpt_oss.convert, blocks.int(), scales)
    raises(r"scales.dtype = torch.float32", gpt_oss.convert, blocks, scales.float())
    raises(r"m_scales = None: the tensor is missing", gpt_oss.convert_layer, {"m_blocks": blocks}, "m")
    raises(r"m.blocks = None: the tensor is missing", gpt_oss.convert_layer, {}, "m")
    raises(r"quant_method = 'fp8'", gpt_oss.convert_layer, {}, "m", {"quant_method": "fp8"})
