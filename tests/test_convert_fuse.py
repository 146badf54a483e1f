"""convert.fuse: projections that share their input stacked into one weight exactly, each part
with its own scales; the cases that cannot be exact are refused by name."""

from __future__ import annotations

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, ConvertedWeight, fuse


def _part(n, k, fmt, seed, scale=1.0):
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05 * scale
    return ConvertedWeight(R.quantize_weight(w, fmt), None, f"p{seed}")


@pytest.mark.parametrize("fmt", ["u4g128-sbf16-zi", "e4m3gc-sf32", "i8g64-sf16", "e4m3g128n128-sf32", "e2m1g32-se8m0"])
def test_fused_weight_is_the_parts_stacked(fmt):
    # q, k, v of different widths and magnitudes: each part's scales stay its own.
    parts = [_part(256, 384, fmt, 1), _part(128, 384, fmt, 2, 7.0), _part(128, 384, fmt, 3, 0.1)]
    fused = fuse(parts, "model.layers.0.self_attn.qkv_proj")
    want = torch.cat([R.dequantize_weight(p.weight) for p in parts], 0)
    assert fused.weight.fmt == parts[0].weight.fmt and fused.weight.codes.shape == (512, 384)
    assert torch.equal(R.dequantize_weight(fused.weight), want)
    assert fused.source == "p1+p2+p3" and fused.perm is None


def test_global_scales_must_agree():
    fmt = "e2m1g16-se4m3-gs"
    a, b = _part(64, 128, fmt, 1), _part(64, 128, fmt, 2, 5.0)
    assert not torch.equal(a.weight.global_scale, b.weight.global_scale)
    with pytest.raises(ConversionError, match="part 1 global scale") as e:
        fuse([a, b], "gate_up")
    assert e.value.layer == "gate_up"
    same = ConvertedWeight(R.QuantizedWeight(fmt, b.weight.codes, b.weight.scales, None, a.weight.global_scale))
    fused = fuse([a, same])
    assert torch.equal(
        R.dequantize_weight(fused.weight), torch.cat([R.dequantize_weight(a.weight), R.dequantize_weight(same.weight)])
    )


def test_parts_that_cannot_be_stacked_are_named():
    with pytest.raises(ConversionError, match="part 1 format"):
        fuse([_part(64, 128, "u4g64-sbf16", 1), _part(64, 128, "u4g32-sbf16", 2)])
    with pytest.raises(ConversionError, match="part 1 inputs"):
        fuse([_part(64, 128, "u4g64-sbf16", 1), _part(64, 192, "u4g64-sbf16", 2)])
    # A 128 x 128 block would straddle parts of 100 rows; the last part may end in a partial block.
    with pytest.raises(ConversionError, match="part 0 outputs.*N group \\(128\\)"):
        fuse([_part(100, 256, "e4m3g128n128-sf32", 1), _part(128, 256, "e4m3g128n128-sf32", 2)])
    assert fuse(
        [_part(128, 256, "e4m3g128n128-sf32", 1), _part(100, 256, "e4m3g128n128-sf32", 2)]
    ).weight.codes.shape == (228, 256)
    p = _part(64, 128, "u4g64-sbf16", 1)
    permuted = ConvertedWeight(p.weight, torch.randperm(128, generator=torch.Generator().manual_seed(0)))
    with pytest.raises(ConversionError, match="input permutation"):
        fuse([p, permuted])
    with pytest.raises(TypeError, match="ConvertedWeight"):
        fuse([])
