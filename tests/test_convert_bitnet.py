"""BitNet importer (humming_aot.convert.bitnet) against synthetic checkpoints.

Convention from transformers ``integrations/bitnet.py``: ``weight`` uint8 [ceil(N/4), K], field i
(bits 2i) of row r holds output i * ceil(N/4) + r as ternary + 1; ``BitLinear`` divides the output by
``weight_scale`` (w = t / weight_scale), ``AutoBitLinear`` (offline) multiplies (w = t * weight_scale).
The packer works on Python integers; expected weights are those formulas in float64, rounded once.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, bitnet


def pack(t):
    """ternary [N, K] -> uint8 [ceil(N/4), K] in transformers' plane order."""
    N, K = t.shape
    Rr = -(-N // 4)
    out = [[0] * K for _ in range(Rr)]
    for n in range(N):
        i, r = divmod(n, Rr)
        for k in range(K):
            out[r][k] |= (int(t[n, k]) + 1) << (2 * i)
    return torch.tensor(out, dtype=torch.uint8)


@pytest.mark.parametrize("N,K", [(16, 24), (10, 8)])  # N = 10: the last plane is partly padding
def test_bitnet_bitlinear(N, K):
    g = torch.Generator().manual_seed(N)
    t = torch.randint(-1, 2, (N, K), generator=g)
    ws = torch.tensor([2.3984375], dtype=torch.bfloat16)
    cfg = {"quant_method": "bitnet", "linear_class": "bitlinear", "quantization_mode": "offline"}
    res = bitnet.convert_layer({"l.weight": pack(t), "l.weight_scale": ws}, "l", cfg, out_features=N)
    w = res.weight
    assert str(w.fmt) == "u2gc-sf32" and w.shape == (N, K) and res.source == "bitnet_bitlinear"
    assert torch.equal(w.codes, (t + 2).to(torch.uint8))
    assert torch.equal(R.dequantize_weight(w), (t.double() / ws.double()).float())


def test_bitnet_autobitlinear_packed_and_unpacked():
    g = torch.Generator().manual_seed(5)
    t = torch.randint(-1, 2, (12, 16), generator=g)
    ws = torch.tensor([0.8125], dtype=torch.bfloat16)
    for weight in (pack(t), t.to(torch.bfloat16)):
        res = bitnet.convert(weight, ws, linear_class="autobitlinear")
        assert str(res.weight.fmt) == "u2gc-sbf16"
        assert torch.equal(R.dequantize_weight(res.weight), (t.double() * ws.double()).float())


def test_bitnet_plane_order_by_hand():
    # transformers' docstring example: 0b10100001 unpacks to rows 0, 2, 4, 6 = 0, -1, 1, 1 (R = 2)
    packed = torch.tensor([[0b10100001], [0b10010000]], dtype=torch.uint8)
    res = bitnet.convert(packed, torch.tensor([1.0]), linear_class="autobitlinear")
    vals = R.dequantize_weight(res.weight)[:, 0].tolist()
    assert vals[0::2] == [0, -1, 1, 1] and vals[1::2] == [-1, -1, 0, 1]


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_bitnet_errors():
    ws = torch.tensor([1.5])
    raises(
        r"layer 'L': weight = .*holds the 2-bit value 3",
        bitnet.convert,
        torch.full((2, 4), 0xFF, dtype=torch.uint8),
        ws,
        layer="L",
    )
    raises(
        r"weight.shape = \[2, 4\]: expected \[ceil\(12 / 4\) = 3, K\]",
        bitnet.convert,
        torch.zeros(2, 4, dtype=torch.uint8),
        ws,
        out_features=12,
    )
    raises(r"linear_class = 'foo'", bitnet.convert, torch.zeros(2, 4, dtype=torch.uint8), ws, linear_class="foo")
    raises(
        r"weight.dtype = torch.bfloat16: BitLinear checkpoints store packed uint8",
        bitnet.convert,
        torch.zeros(2, 4, dtype=torch.bfloat16),
        ws,
    )
    raises(
        r"unpacked BitNet weights must be -1, 0 or 1",
        bitnet.convert,
        torch.full((2, 4), 0.5),
        ws,
        linear_class="autobitlinear",
    )
    raises(
        r"weight_scale = .*positive finite", bitnet.convert, torch.zeros(2, 4, dtype=torch.uint8), torch.tensor([0.0])
    )
    raises(r"quantization_mode = 'online'", bitnet.convert_layer, {}, "p", {"quantization_mode": "online"})
    raises(r"quant_method = 'awq'", bitnet.convert_layer, {}, "p", {"quant_method": "awq"})
