"""FP8 ``weight_scale_inv`` importer (humming_aot.convert.fp8_block) against synthetic checkpoints.

The checkpoint follows DeepSeek-V3's published convention (``inference/kernel.py``,
``weight_dequant``): weight float8_e4m3fn [N, K], weight_scale_inv float32 [ceil(N/bn), ceil(K/bk)],
value ``fp8 * weight_scale_inv[n // bn, k // bk]`` (a product, despite the name). The expected
weight is computed here in float64 (exact: 4 + 24 mantissa bits) by explicit index arithmetic and
rounded once to float32, which is what the unified weight must dequantize to, bit for bit.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, fp8_block


def rand_fp8_bytes(shape, g):
    b = torch.randint(0, 256, shape, generator=g, dtype=torch.int64)
    b[(b & 0x7F) == 0x7F] = 0x38  # the two NaN patterns of e4m3fn -> 1.0
    return b.to(torch.uint8)


def make(N, K, bn, bk, seed):
    g = torch.Generator().manual_seed(seed)
    raw = rand_fp8_bytes((N, K), g)
    weight = raw.view(torch.float8_e4m3fn)
    s = torch.rand(-(-N // bn), -(-K // bk), generator=g, dtype=torch.float64) * 1e-3 + 1e-5
    s = s.float()
    rows = torch.arange(N)[:, None] // bn
    cols = torch.arange(K)[None, :] // bk
    expected = (weight.double() * s.double()[rows, cols]).float()
    return raw, weight, s, expected


@pytest.mark.parametrize(
    "N,K,bn,bk",
    [
        (256, 384, 128, 128),
        (200, 300, 128, 128),  # partial last block row and column
        (72, 96, 64, 32),
    ],
)
def test_fp8_block_roundtrip(N, K, bn, bk):
    raw, weight, s, expected = make(N, K, bn, bk, seed=N + K)
    res = fp8_block.convert(weight, s, block_size=[bn, bk], layer="l")
    w = res.weight
    assert str(w.fmt) == f"e4m3g{bk}n{bn}-sf32" and res.perm is None and res.source == "fp8_block"
    assert torch.equal(w.codes, raw)
    assert w.scales.dtype == torch.float32 and torch.equal(w.scales, s)
    assert torch.equal(R.dequantize_weight(w), expected)


def test_fp8_block_convert_layer_deepseek_config():
    raw, weight, s, expected = make(256, 128, 128, 128, seed=1)
    p = "model.layers.0.self_attn.kv_a_proj_with_mqa"
    cfg = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    res = fp8_block.convert_layer({f"{p}.weight": weight, f"{p}.weight_scale_inv": s}, p, cfg)
    assert str(res.weight.fmt) == "e4m3g128n128-sf32"
    assert torch.equal(R.dequantize_weight(res.weight), expected)


def test_fp8_per_tensor_without_block_size():
    raw, weight, _, _ = make(24, 40, 128, 128, seed=2)
    s = torch.tensor([0.0123], dtype=torch.float32)
    res = fp8_block.convert_layer({"m.weight": weight, "m.weight_scale": s}, "m", {"quant_method": "fp8"})
    assert str(res.weight.fmt) == "e4m3gc-sf32"
    assert torch.equal(res.weight.scales, s.expand(24, 1).reshape(24, 1))
    assert torch.equal(R.dequantize_weight(res.weight), (weight.double() * s.double()).float())


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_fp8_block_errors():
    raw, weight, s, _ = make(256, 256, 128, 128, seed=3)
    e = raises(
        r"layer 'L': weight_scale_inv.shape = \[2, 1\]: expected \[2, 2\]",
        fp8_block.convert,
        weight,
        s[:, :1],
        layer="L",
    )
    assert e.field == "weight_scale_inv.shape"
    raises(r"weight.dtype = torch.bfloat16: expected float8_e4m3fn", fp8_block.convert, weight.bfloat16(), s)
    raises(
        r"weight_block_size = \[96, 128\]: the unified format cannot represent it",
        fp8_block.convert,
        weight,
        s,
        block_size=[96, 128],
    )
    raises(r"weight_scale_inv.dtype = torch.float64", fp8_block.convert, weight, s.double())
    raises(
        r"p.weight_scale_inv = None: the tensor is missing",
        fp8_block.convert_layer,
        {"p.weight": weight},
        "p",
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
    )
    raises(r"quant_method = 'gptq'", fp8_block.convert_layer, {"p.weight": weight}, "p", {"quant_method": "gptq"})
    raises(r"fmt = 'e5m2'", fp8_block.convert_layer, {"p.weight": weight}, "p", {"quant_method": "fp8", "fmt": "e5m2"})
    raises(r"without weight_block_size the scale is one value", fp8_block.convert, weight, s, block_size=None)
