"""convert.fuse: projections that share their input stacked into one weight exactly, each part
with its own scales; the cases that cannot be exact are refused by name."""

from __future__ import annotations

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, ConvertedWeight, fuse
from humming_aot.testing import assert_gemm_close


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


# ---- replace_linears(fuse=...): a model with fused modules, a checkpoint with the parts --------


class _Block(torch.nn.Module):
    """A vLLM-style block: q, k, v as one qkv_proj, gate and up as one gate_up_proj; o_proj apart."""

    def __init__(self, k, nq, nkv, ff):
        super().__init__()
        self.qkv_proj = torch.nn.Linear(k, nq + 2 * nkv, bias=False)
        self.o_proj = torch.nn.Linear(nq, k, bias=False)
        self.gate_up_proj = torch.nn.Linear(k, 2 * ff, bias=False)


class _Model(torch.nn.Module):
    def __init__(self, k=256, nq=256, nkv=128, ff=384):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block(k, nq, nkv, ff) for _ in range(2)])


def _checkpoint(model, fmt):
    """Converted weights of the parts, as a checkpoint that keeps them apart would give them."""
    out, seed = {}, 10
    for i, b in enumerate(model.layers):
        k = b.qkv_proj.in_features
        nq = b.o_proj.in_features
        nkv = (b.qkv_proj.out_features - nq) // 2
        ff = b.gate_up_proj.out_features // 2
        for part, n in [
            ("q_proj", nq),
            ("k_proj", nkv),
            ("v_proj", nkv),
            ("o_proj", k),
            ("gate_proj", ff),
            ("up_proj", ff),
        ]:
            seed += 1
            out[f"layers.{i}.{part}"] = _part(n, nq if part == "o_proj" else k, fmt, seed)
    return out


@pytest.mark.parametrize("fmt", ["u4g128-sbf16", "e4m3gc-sf32"])
def test_replace_linears_fuses_parts_into_the_models_fused_modules(fmt):
    import humming_aot as ha

    model = _Model()
    ckpt = _checkpoint(model, fmt)
    # Streamed in an order that interleaves the parts of different modules.
    order = sorted(ckpt.items(), key=lambda kv: (kv[0].rsplit(".", 1)[1], kv[0]))
    swapped = ha.replace_linears(model, iter(order), fuse=ha.FUSED_PROJECTIONS, progress=False)
    assert sorted(swapped) == sorted(
        f"layers.{i}.{m}" for i in range(2) for m in ("qkv_proj", "o_proj", "gate_up_proj")
    )
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    for i, b in enumerate(model.layers):
        assert isinstance(b.qkv_proj, ha.QuantLinear) and isinstance(b.gate_up_proj, ha.QuantLinear)
        for fused, parts in ha.FUSED_PROJECTIONS.items():
            want = torch.cat([R.dequantize_weight(ckpt[f"layers.{i}.{p}"].weight) for p in parts], 0)
            ref = x.double() @ want.double().T
            assert_gemm_close(getattr(b, fused)(x), ref, x.float(), want, f"layers.{i}.{fused}")


def test_replace_linears_fuse_errors_name_the_module():
    import humming_aot as ha

    model = _Model()
    ckpt = _checkpoint(model, "u4g128-sbf16")
    del ckpt["layers.1.v_proj"]
    with pytest.raises(
        ValueError,
        match=r"layers\.1\.qkv_proj \(fuses q_proj, k_proj, v_proj; the checkpoint has only q_proj, k_proj\)",
    ):
        ha.replace_linears(model, ckpt, fuse=ha.FUSED_PROJECTIONS, progress=False)
    assert isinstance(model.layers[0].qkv_proj, torch.nn.Linear)  # nothing swapped on an error
    # Without strict the incomplete module stays in float; the others are swapped.
    swapped = ha.replace_linears(model, ckpt, fuse=ha.FUSED_PROJECTIONS, strict=False, progress=False)
    assert "layers.1.qkv_proj" not in swapped and "layers.0.qkv_proj" in swapped
    assert isinstance(model.layers[1].qkv_proj, torch.nn.Linear)
    # Parts that cannot be stacked exactly (different formats): the fuse error, under the module's name.
    model = _Model()
    ckpt = _checkpoint(model, "u4g128-sbf16")
    ckpt["layers.0.up_proj"] = _part(384, 256, "u4g64-sbf16", 99)
    with pytest.raises(ValueError, match=r"layers\.0\.gate_up_proj \(.*part 1 format"):
        ha.replace_linears(model, ckpt, fuse=ha.FUSED_PROJECTIONS, progress=False)
    with pytest.raises(ValueError, match="distinct part names"):
        ha.replace_linears(model, ckpt, fuse={"qkv_proj": ("q_proj", "q_proj")}, progress=False)
    with pytest.raises(ValueError, match="a part of both"):
        ha.replace_linears(model, ckpt, fuse={"a": ("q_proj",), "b": ("q_proj",)}, progress=False)


def test_replace_linears_without_fused_modules_takes_the_parts_as_they_are():
    """A model whose parts are modules of their own (Hugging Face Llama) is unaffected by fuse."""
    import humming_aot as ha

    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = torch.nn.Linear(128, 64, bias=False)
            self.k_proj = torch.nn.Linear(128, 64, bias=False)

    model = Split()
    ckpt = {"q_proj": _part(64, 128, "u4g64-sbf16", 1), "k_proj": _part(64, 128, "u4g64-sbf16", 2)}
    swapped = ha.replace_linears(model, ckpt, fuse=ha.FUSED_PROJECTIONS, progress=False)
    assert sorted(swapped) == ["k_proj", "q_proj"]
