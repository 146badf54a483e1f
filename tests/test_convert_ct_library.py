"""The compressed-tensors importer against the compressed-tensors library itself (pip
``compressed-tensors``): weights compressed by the library's own compressors, with qparams from its
own ``calculate_qparams``, convert to unified weights whose reference dequantization equals the
library's ``decompress`` exactly (rounded to the model dtype, as the library returns it), for every
compressor the importer takes and for shapes that are not multiples of the packing."""

from __future__ import annotations

import pytest
import torch
from compressed_tensors.compressors import BaseCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

from humming_aot import reference as R
from humming_aot.convert import compressed_tensors as ct


def _observed(w: torch.Tensor, args: QuantizationArgs):
    """Per-scale minima and maxima of w, shaped as the library's qparams for the strategy."""
    n, k = w.shape
    s = getattr(args.strategy, "value", args.strategy)
    wf = w.float()
    if s in ("group", "tensor_group"):
        g = args.group_size
        wg = wf.reshape(n, k // g, g)
        return wg.amin(-1), wg.amax(-1)
    if s == "channel":
        return wf.amin(1, keepdim=True), wf.amax(1, keepdim=True)
    if s == "tensor":
        return wf.amin().reshape(1), wf.amax().reshape(1)
    if s == "block":
        r, c = args.block_structure
        wb = wf.reshape(n // r, r, k // c, c)
        return wb.amin((1, 3)), wb.amax((1, 3))
    raise AssertionError(s)


CASES = [
    # (compressor, n, k, dtype, QuantizationArgs fields, the unified format expected)
    ("pack-quantized", 136, 384, torch.bfloat16, dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128), "u4g128-sbf16"),
    ("pack-quantized", 100, 256, torch.bfloat16, dict(num_bits=4, type="int", symmetric=False, strategy="group", group_size=64), "u4g64-sbf16-zi"),
    ("pack-quantized", 90, 256, torch.float16, dict(num_bits=4, type="int", symmetric=False, strategy="channel"), "u4gc-sf16-zi"),
    ("pack-quantized", 72, 200, torch.bfloat16, dict(num_bits=8, type="int", symmetric=True, strategy="channel"), "u8gc-sbf16"),
    ("pack-quantized", 40, 96, torch.bfloat16, dict(num_bits=2, type="int", symmetric=True, strategy="group", group_size=32), "u2g32-sbf16"),
    ("int-quantized", 64, 256, torch.bfloat16, dict(num_bits=8, type="int", symmetric=True, strategy="channel"), "i8gc-sbf16"),
    ("float-quantized", 64, 256, torch.bfloat16, dict(num_bits=8, type="float", symmetric=True, strategy="channel"), "e4m3gc-sbf16"),
    ("float-quantized", 48, 160, torch.float16, dict(num_bits=8, type="float", symmetric=True, strategy="tensor"), "e4m3gc-sf16"),
    ("float-quantized", 256, 384, torch.bfloat16, dict(num_bits=8, type="float", symmetric=True, strategy="block", block_structure=[128, 128]), "e4m3g128n128-sbf16"),
    ("nvfp4-pack-quantized", 64, 256, torch.bfloat16, dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", group_size=16), "e2m1g16-se4m3-gs"),
    ("mxfp4-pack-quantized", 64, 256, torch.bfloat16, dict(num_bits=4, type="float", symmetric=True, strategy="group", group_size=32), "e2m1g32-se8m0"),
]  # fmt: skip


@pytest.mark.parametrize("compressor,n,k,dtype,fields,unified", CASES, ids=[f"{c[0]}-{c[5]}" for c in CASES])
def test_importer_matches_the_library(compressor, n, k, dtype, fields, unified):
    torch.manual_seed(n * 1000 + k)
    w = (torch.randn(n, k) * 0.05).to(dtype)
    args = QuantizationArgs(**fields)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    lo, hi = _observed(w, args)
    gs = generate_gparam(w.float().amin(), w.float().amax()) if compressor == "nvfp4-pack-quantized" else None
    scale, zp = calculate_qparams(lo, hi, args, global_scale=gs)
    state = {"weight": w, "weight_scale": scale if compressor == "nvfp4-pack-quantized" else scale.to(dtype)}
    state["weight_zero_point"] = zp
    if gs is not None:
        state["weight_global_scale"] = gs
    comp = BaseCompressor.load_from_registry(compressor)
    stored = {name: t for name, t in comp.compress(dict(state), scheme).items() if t is not None}
    theirs = comp.decompress(dict(stored), scheme)["weight"]
    cw = ct.convert_layer(
        {f"model.layers.0.mlp.down_proj.{name}": t for name, t in stored.items()},
        "model.layers.0.mlp.down_proj",
        {"weights": args.model_dump(), "format": compressor},
    )
    assert str(cw.weight.fmt) == unified
    ours = R.dequantize_weight(cw.weight)
    assert ours.shape == (n, k) and theirs.shape == (n, k)
    assert torch.equal(ours.to(theirs.dtype), theirs), (ours.to(theirs.dtype) - theirs).abs().max()
    # The unified codes carry the library's quantized values, not a re-quantization of them.
    if compressor in ("pack-quantized", "int-quantized"):
        assert cw.weight.codes.unique().numel() > 2


# ---- a whole model ----------------------------------------------------------------------------


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


def test_tiny_llama_checkpoint_end_to_end(tmp_path):
    """A randomly initialised Llama-architecture model (built from a config, nothing downloaded)
    whose linears the library compresses (W4A16, groups of 64, pack-quantized) and which is saved as
    a compressed-tensors checkpoint: load_quantized + replace_linears give the logits of the same
    model with the library's own decompressed weights, to bf16 round-off (not quantization error)."""
    import json

    from safetensors.torch import save_file

    import humming_aot as ha

    model = _tiny_llama()
    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=64)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    comp = BaseCompressor.load_from_registry("pack-quantized")
    tensors, decompressed = {}, {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            w = mod.weight.detach()
            scale, zp = calculate_qparams(*_observed(w, args), args)
            stored = comp.compress({"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zp}, scheme)
            stored = {k: v for k, v in stored.items() if v is not None}
            tensors.update({f"{name}.{k}": v.contiguous() for k, v in stored.items()})
            decompressed[name] = comp.decompress(dict(stored), scheme)["weight"]
    for name, t in model.state_dict().items():
        if name.rpartition(".")[0] not in decompressed:
            tensors[name] = t.contiguous()
    config = model.config.to_dict()
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump(), "format": "pack-quantized"}},
        "ignore": ["lm_head"],
    }
    (tmp_path / "config.json").write_text(json.dumps(config, default=str))
    save_file(tensors, str(tmp_path / "model.safetensors"))

    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(1))
    reference = _tiny_llama()  # the same weights, then the library's dequantized linears
    with torch.no_grad():
        for name, w in decompressed.items():
            reference.get_submodule(name).weight.copy_(w)
        want = reference(ids).logits.float()
    converted = ha.load_quantized(str(tmp_path), progress=False)
    assert set(converted) == set(decompressed)
    # The README's three lines: a float skeleton from the checkpoint's config (other random weights
    # than the checkpoint's), its float tensors from the checkpoint, the quantized linears swapped in.
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(123)
    quantized = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path), dtype=torch.bfloat16).eval()
    quantized.load_state_dict(ha.load_unquantized(tmp_path, dtype=torch.bfloat16), strict=False)
    swapped = ha.replace_linears(quantized, converted, progress=False)
    assert len(swapped) == len(decompressed) and type(quantized.lm_head) is torch.nn.Linear
    with torch.no_grad():
        got = quantized(ids).logits.float()
    rel = (got - want).norm() / want.norm()
    with torch.no_grad():
        quant_error = (_tiny_llama()(ids).logits.float() - want).norm() / want.norm()  # the float model's
    # (Measured: 0.007 against a quantization error of 0.17.)
    assert rel < 2e-2 and rel < quant_error / 5, f"relative error {rel:.3g} (quantization error {quant_error:.3g})"


def test_fused_qkv_keeps_each_parts_tensor_scale():
    """q, k and v compressed by the library with FP8 per-tensor scales of their own (as a serving
    stack that fuses them meets them): fused by convert.fuse, the weight is the three library
    decompressions stacked, bit for bit (each part's tensor scale becomes its channels' scale)."""
    from humming_aot.convert import fuse

    args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="tensor")
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    comp = BaseCompressor.load_from_registry("float-quantized")
    parts, theirs = [], []
    for i, (n, mag) in enumerate(((128, 1.0), (64, 9.0), (64, 0.02))):
        w = (torch.randn(n, 192, generator=torch.Generator().manual_seed(i)) * mag).to(torch.bfloat16)
        scale, zp = calculate_qparams(*_observed(w, args), args)
        stored = comp.compress({"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zp}, scheme)
        stored = {k: v for k, v in stored.items() if v is not None}
        theirs.append(comp.decompress(dict(stored), scheme)["weight"])
        prefix = f"model.layers.0.self_attn.{'qkv'[i]}_proj"
        parts.append(
            ct.convert_layer(
                {f"{prefix}.{k}": v for k, v in stored.items()},
                prefix,
                {"weights": args.model_dump(), "format": "float-quantized"},
            )
        )
    assert len({float(p.weight.scales[0, 0]) for p in parts}) == 3, "three different tensor scales"
    fused = fuse(parts, "model.layers.0.self_attn.qkv_proj")
    want = torch.cat(theirs, 0)
    assert torch.equal(R.dequantize_weight(fused.weight).to(want.dtype), want)
