"""Whole checkpoints through humming_aot.load_quantized and replace_linears, on the CPU.

Each test writes a tiny checkpoint directory (config.json, two safetensors shards and
model.safetensors.index.json, one layer's tensors spread over both shards) for GPTQ (act-order, with
a ``dynamic`` override), AWQ or compressed-tensors (two config groups, an ignore list). The packers
here follow each format's published layout on Python integers, apart from the importers (as in
tests/test_convert_*.py). The known dequantized weights become the float reference model; the
quantized model built by replace_linears must give its output up to bf16 round-off, while a wrong
code order, group map or permutation would be off by the size of the weights.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys

import pytest
import torch

import humming_aot as ha
from humming_aot import formats as F
from humming_aot.convert import ConversionError
from humming_aot.layers import QuantLinear
from humming_aot.loading import CheckpointError

safetensors_torch = pytest.importorskip("safetensors.torch", reason="the convert extra (safetensors) is not installed")

H, I = 128, 192  # hidden and intermediate sizes: K = 192 has three groups of 64, six of 32
LAYERS = [f"model.layers.{i}.{name}" for i in range(2) for name in ("self_attn.q_proj", "mlp.up_proj", "mlp.down_proj")]


def to_int32(u: int) -> int:
    return u - (1 << 32) if u >= 1 << 31 else u


def stream_pack_rows(values: torch.Tensor, bits: int) -> torch.Tensor:
    """GPTQ: int32 [L*bits/32, C], column c the LSB-first bit stream of values[:, c]."""
    L, C = values.shape
    out = [[0] * C for _ in range(L * bits // 32)]
    for c in range(C):
        stream = 0
        for i in range(L):
            stream |= int(values[i, c]) << (bits * i)
        for w in range(len(out)):
            out[w][c] = to_int32((stream >> (32 * w)) & 0xFFFFFFFF)
    return torch.tensor(out, dtype=torch.int32)


def awq_pack(values: torch.Tensor) -> torch.Tensor:
    """AWQ GEMM: [R, N] nibbles -> int32 [R, N/8], nibble i of word c holding output 8c + order[i]."""
    order = (0, 2, 4, 6, 1, 3, 5, 7)
    return torch.tensor(
        [
            [to_int32(sum(int(row[8 * c + order[i]]) << (4 * i) for i in range(8))) for c in range(len(row) // 8)]
            for row in values.tolist()
        ],
        dtype=torch.int32,
    )


def ct_pack_rows(signed: torch.Tensor, bits: int) -> torch.Tensor:
    """compressed-tensors pack-quantized: [R, C] signed -> int32 [R, C/p], value + 2**(bits-1)."""
    p, off = 32 // bits, 1 << (bits - 1)
    return torch.tensor(
        [
            [
                to_int32(sum((int(v) + off) << (bits * i) for i, v in enumerate(row[j : j + p])))
                for j in range(0, len(row), p)
            ]
            for row in signed.tolist()
        ],
        dtype=torch.int32,
    )


def scales_like(shape, g, dtype):
    return ((torch.rand(shape, generator=g) + 0.05) * 0.02).to(dtype)


def gptq_layer(N, K, gs, g, act_order=True):
    """GPTQ v1, asymmetric 4-bit, act-order (or not): (tensors, float32 weight [N, K])."""
    G = K // gs
    q = torch.randint(0, 16, (K, N), generator=g)
    z = torch.randint(1, 16, (G, N), generator=g)  # v1 stores z - 1, so z >= 1
    s = scales_like((G, N), g, torch.float16)
    order = torch.randperm(K, generator=g) if act_order else torch.arange(K)
    g_idx = (order // gs).to(torch.int32)
    gi = g_idx.long()
    w = (s.float()[gi] * (q.float() - z.float()[gi])).t()
    return {
        "qweight": stream_pack_rows(q, 4),
        "qzeros": stream_pack_rows(z.t() - 1, 4).t().contiguous(),
        "scales": s,
        "g_idx": g_idx,
    }, w


def awq_layer(N, K, gs, g):
    G = K // gs
    q = torch.randint(0, 16, (K, N), generator=g)
    z = torch.randint(0, 16, (G, N), generator=g)
    s = scales_like((G, N), g, torch.float16)
    gi = torch.arange(K) // gs
    w = (s.float()[gi] * (q.float() - z.float()[gi])).t()
    return {"qweight": awq_pack(q), "qzeros": awq_pack(z), "scales": s}, w


def ct_layer(N, K, gs, g):
    """Symmetric int4, group strategy (gs) or channel strategy (gs None)."""
    q = torch.randint(-8, 8, (N, K), generator=g)
    s = scales_like((N, 1 if gs is None else K // gs), g, torch.bfloat16)
    cols = torch.zeros(K, dtype=torch.long) if gs is None else torch.arange(K) // gs
    w = s.float()[:, cols] * q.float()
    return {"weight_packed": ct_pack_rows(q, 4), "weight_scale": s, "weight_shape": torch.tensor([N, K])}, w


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(H, H, bias=True)
        self.mlp = torch.nn.Module()
        self.mlp.up_proj = torch.nn.Linear(H, I, bias=False)
        self.mlp.down_proj = torch.nn.Linear(I, H, bias=True)

    def forward(self, h):
        h = h + self.self_attn.q_proj(h)
        return h + self.mlp.down_proj(torch.relu(self.mlp.up_proj(h)))


class Tiny(torch.nn.Module):
    """The module tree of a transformers decoder, cut down: model.layers.{i}..., lm_head."""

    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([Block(), Block()])
        self.lm_head = torch.nn.Linear(H, 64, bias=False)

    def forward(self, x):
        for block in self.model.layers:
            x = block(x)
        return self.lm_head(x)


def write_checkpoint(path, tensors: dict, quantization_config: dict):
    """config.json + two shards + index; consecutive names go to different shards, so every layer's
    tensors are split between them."""
    names = sorted(tensors)
    shards = {f"model-0000{i + 1}-of-00002.safetensors": names[i::2] for i in range(2)}
    weight_map = {}
    for file, keys in shards.items():
        safetensors_torch.save_file({k: tensors[k].contiguous() for k in keys}, str(path / file))
        weight_map.update({k: file for k in keys})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (path / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "quantization_config": quantization_config})
    )


def make_model_and_checkpoint(path, method, seed=0):
    """(model with random float weights, the float reference holding the dequantized weights,
    config) after writing the checkpoint of ``method`` to ``path``."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    model = Tiny().to(torch.bfloat16)
    ref = copy.deepcopy(model).float()
    tensors = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            tensors[f"{name}.bias"] = module.bias.detach()  # float tensors the loader must pass by
    tensors["lm_head.weight"] = model.lm_head.weight.detach()  # unquantized (ignored) layer
    for name in LAYERS:
        lin = model.get_submodule(name)
        N, K = lin.out_features, lin.in_features
        if method == "gptq":
            # dynamic below: down_proj layers use groups of 32
            layer, w = gptq_layer(N, K, 32 if name.endswith("down_proj") else 64, g)
        elif method == "awq":
            layer, w = awq_layer(N, K, 64, g)
        else:  # config group 1 (channel) targets down_proj by name, group 0 (groups of 64) the rest
            layer, w = ct_layer(N, K, None if name.endswith("down_proj") else 64, g)
        tensors.update({f"{name}.{k}": v for k, v in layer.items()})
        ref.get_submodule(name).weight.data = w
    config = {
        "gptq": {
            "quant_method": "gptq",
            "bits": 4,
            "group_size": 64,
            "desc_act": True,
            "sym": False,
            "checkpoint_format": "gptq",
            "dynamic": {r"+:.*\.down_proj": {"group_size": 32}},
        },
        "awq": {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 64,
            "zero_point": True,
            "version": "gemm",
            "modules_to_not_convert": ["lm_head"],
        },
        "compressed-tensors": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "quantization_status": "compressed",
            "ignore": ["lm_head"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "symmetric": True,
                        "strategy": "group",
                        "group_size": 64,
                        "dynamic": False,
                    },
                },
                "group_1": {
                    "targets": [r"re:.*down_proj$"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "symmetric": True,
                        "strategy": "channel",
                        "dynamic": False,
                    },
                },
            },
        },
    }[method]
    write_checkpoint(path, tensors, config)
    return model, ref, config


def rel_err(a, b):
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("method", ["gptq", "awq", "compressed-tensors"])
def test_checkpoint_to_model(tmp_path, method):
    model, ref, _ = make_model_and_checkpoint(tmp_path, method)
    converted = ha.load_quantized(tmp_path, progress=False)
    assert sorted(converted) == sorted(LAYERS)  # the quantized layers, nothing else (biases, lm_head)
    assert all((cw.perm is not None) == (method == "gptq") for cw in converted.values())
    if method == "gptq":  # the dynamic override reached the down projections
        assert str(converted["model.layers.0.mlp.down_proj"].weight.fmt).startswith("u4g32-")
        assert str(converted["model.layers.0.mlp.up_proj"].weight.fmt).startswith("u4g64-")
    if method == "compressed-tensors":  # group_1 (by name) beat group_0 (by class) for down_proj
        assert converted["model.layers.0.mlp.down_proj"].weight.scales.shape[1] == 1
        assert converted["model.layers.0.mlp.up_proj"].weight.scales.shape[1] == H // 64
    swapped = ha.replace_linears(model, converted, progress=False)
    assert sorted(swapped) == sorted(LAYERS)
    for name in LAYERS:
        lin = model.get_submodule(name)
        assert isinstance(lin, QuantLinear)
        assert (lin.in_perm is not None) == (method == "gptq")
        if ref.get_submodule(name).bias is not None:
            assert torch.equal(lin.bias.float(), ref.get_submodule(name).bias)
    assert type(model.lm_head) is torch.nn.Linear  # ignored: stays float
    x = torch.randn(2, 5, H, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    with torch.no_grad():
        got, want = model(x), ref(x.float())
    assert got.dtype == torch.bfloat16
    assert rel_err(got, want) < 1e-2  # bf16 round-off over a few layers (4e-3); a wrong order gives ~1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["gptq", "awq", "compressed-tensors"])
def test_checkpoint_to_model_on_the_gpu(tmp_path, method):
    """The same checkpoints onto the GPU: replace_linears packs each weight for the layout the
    device's table prefers, and the model runs on the GPU kernels (no instance of the generic
    backend, no CPU fallback) with the output of the float reference to bf16 round-off."""
    import warnings

    from humming_aot import dispatch, pack

    model, ref, _ = make_model_and_checkpoint(tmp_path, method)
    converted = ha.load_quantized(tmp_path, progress=False)
    # GPTQ and AWQ store f16 scales; this model runs in bf16, which no fast kernel pairs with them
    f16_scales = any(cw.weight.fmt.scale == F.dtype("f16") for cw in converted.values())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.simplefilter("error", dispatch.SlowPathWarning)  # a slow-path choice fails the test
        ha.replace_linears(model, converted, device="cuda", progress=False)  # the README's order:
        model = model.cuda()  # the quantized linears packed on the GPU, then the rest moved there
        x = torch.randn(2, 5, H, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
        with torch.no_grad():
            got = model(x.cuda())
    for name in LAYERS:
        lin = model.get_submodule(name)
        assert lin.codes.is_cuda and lin.packed.layout != pack.LAYOUTS["generic"], (name, lin.packed.layout)
    with torch.no_grad():
        want = ref(x.float())
    assert got.is_cuda and got.dtype == torch.bfloat16
    assert rel_err(got.cpu(), want) < 1e-2
    assert any("scales were rounded" in str(w.message) for w in seen) == f16_scales, [str(w.message) for w in seen]


def test_f16_scales_are_rounded_to_bf16_only_where_that_gives_a_fast_kernel(monkeypatch):
    """On a GPU (an H200, described: no GPU needed) a bf16 layer whose weight has f16 scales (as
    GPTQ / AWQ checkpoints store them) has no fast kernel (the sm90 and sm80 kernels read scales
    in the activations' type): replace_linears rounds its scales to bf16 where that gives one (the
    GPU test above runs it end to end). An f16 layer keeps its f16 scales."""
    from humming_aot import dispatch, loading
    from humming_aot.reference import dequantize_weight, quantize_weight

    monkeypatch.setattr(dispatch, "_device_facts", lambda device=None: (90, 132, "NVIDIA H200"))
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(3))
    q = quantize_weight(w, "u4g128-sf16")
    assert q.scales.dtype == torch.float16
    bf16, f16, cuda = F.parse_activation_format("bf16"), F.parse_activation_format("f16"), torch.device("cuda")
    assert not dispatch.fast_layouts(F.GemmFormat(bf16, q.fmt, "bf16"), cuda, n=256, k=256)  # no fast kernel

    fmt = loading._act_type_scale_format(q.fmt, bf16, "bf16", cuda, 256, 256)
    assert fmt == F.parse_weight_format("u4g128-sbf16")
    assert dispatch.fast_layouts(F.GemmFormat(bf16, fmt, "bf16"), cuda, n=256, k=256)
    assert loading._act_type_scale_format(q.fmt, f16, "f16", cuda, 256, 256) is None  # f16 kernels exist
    # a weight packed already counts only the kernels of its layout: none of the generic one's is fast
    lid = dispatch.preferred_layout(F.GemmFormat(bf16, fmt, "bf16"), cuda, n=256, k=256)
    assert loading._act_type_scale_format(q.fmt, bf16, "bf16", cuda, 256, 256, lid) == fmt
    assert loading._act_type_scale_format(q.fmt, bf16, "bf16", cuda, 256, 256, 1) is None
    # what the rounding does to the weight: at most half a bf16 unit of each scale
    r = dataclasses.replace(q, fmt=fmt, scales=q.scales.to(torch.bfloat16))
    err = (dequantize_weight(r) - dequantize_weight(q)).abs()
    assert 0 < float(err.max()) and bool((err <= dequantize_weight(q).abs() * 2.0**-8 + 1e-12).all())


def test_fp4_scales_go_to_bf16_exactly_where_that_gives_a_fast_kernel(monkeypatch):
    """MXFP4's e8m0 scales (powers of two from 2^-127) and NVFP4's e4m3 ones are values bf16 holds
    exactly: on a GPU (an H200, described) whose build has the sm90 e2m1 kernels with bf16 scales, a
    bf16 layer gets its scales in bf16, the same weight value for value, counted as not rounded
    (no warning); e8m0 scales stay as they are for f16 activations (f16 cannot hold 2^-127)."""
    from humming_aot import dispatch, loading
    from humming_aot.reference import dequantize_weight, quantize_weight, scale_value

    monkeypatch.setattr(dispatch, "_device_facts", lambda device=None: (90, 132, "NVIDIA H200"))
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(4)) * 0.05
    bf16, f16, cuda = F.parse_activation_format("bf16"), F.parse_activation_format("f16"), torch.device("cuda")
    converted = 0
    for wfmt, target in (("e2m1g32-se8m0", "e2m1g32-sbf16"), ("e2m1g16-se4m3-gs", "e2m1g16-sbf16-gs")):
        q = quantize_weight(w, wfmt)
        tf = F.parse_weight_format(target)
        kernel = bool(dispatch.fast_layouts(F.GemmFormat(bf16, tf, "bf16"), cuda, n=256, k=256))
        assert not dispatch.fast_layouts(F.GemmFormat(bf16, q.fmt, "bf16"), cuda, n=256, k=256)
        assert loading._act_type_scale_format(q.fmt, bf16, "bf16", cuda, 256, 256) == (tf if kernel else None)
        converted += kernel
        assert not loading._scales_rounded(q.fmt, tf)
        s = loading._scales_in(q.scales, q.fmt, torch.bfloat16)
        assert s.dtype == torch.bfloat16 and torch.equal(s.float(), scale_value(q.scales, q.fmt))
        r = dataclasses.replace(q, fmt=tf, scales=s)
        assert torch.equal(dequantize_weight(r), dequantize_weight(q))
    mx = quantize_weight(w, "e2m1g32-se8m0")
    assert loading._act_type_scale_format(mx.fmt, f16, "f16", cuda, 256, 256) is None
    # the e8m0 bytes at their ends (0: 2^-127, a bf16 subnormal; 254: 2^127) decode, not cast
    b = torch.tensor([[0, 1, 126, 127, 128, 254]], dtype=torch.uint8)
    s = loading._scales_in(b, mx.fmt, torch.bfloat16)
    assert torch.equal(s.float(), torch.exp2(b.double() - 127).float())
    with pytest.raises(ValueError, match=r"scale at group \[0, 2\] is NaN \(byte 0xFF\)"):
        loading._scales_in(torch.tensor([[1, 2, 0xFF]], dtype=torch.uint8), mx.fmt, torch.bfloat16)
    assert loading._scales_rounded(F.parse_weight_format("u4g128-sf16"), F.parse_weight_format("u4g128-sbf16"))
    from humming_aot import registry

    if any(i.name.startswith("sm90_wgmma_dense_a-bf16_w-e2m1g32-sbf16") for i in registry.instances()):
        assert converted >= 1  # every build with the MXFP4 kernel (ci has one) converts here


def test_checkpoint_scales_stay_exact_on_the_cpu(tmp_path):
    """On the CPU (the reference takes any scale type) a GPTQ checkpoint's f16 scales go into the
    bf16 model's layers unrounded, and nothing warns."""
    import warnings

    model, _, _ = make_model_and_checkpoint(tmp_path, "gptq")
    converted = ha.load_quantized(tmp_path, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        built = ha.replace_linears(model, converted, progress=False)
    for name, lin in built.items():
        assert lin.packed.fmt.scale == F.dtype("f16"), name
        assert torch.equal(ha.unpack_weight(lin.packed).scales, converted[name].weight.scales), name


@pytest.mark.parametrize("method", ["gptq", "awq", "compressed-tensors"])
def test_unquantized_tensors_complete_a_fresh_model(tmp_path, method):
    """A model built afresh (other random weights than the checkpoint's) gets the checkpoint's
    float tensors from load_unquantized (the quantized linears' biases, the ignored lm_head) and
    its quantized linears from load_quantized: then it is the reference model, to bf16 round-off."""
    _, ref, _ = make_model_and_checkpoint(tmp_path, method)
    rest = ha.load_unquantized(tmp_path, dtype=torch.bfloat16)
    quantized_fields = ("qweight", "qzeros", "scales", "g_idx", "weight_packed", "weight_scale", "weight_shape")
    assert not any(n.rsplit(".", 1)[1] in quantized_fields for n in rest), sorted(rest)
    assert "lm_head.weight" in rest and all(t.dtype == torch.bfloat16 for t in rest.values())
    torch.manual_seed(123)
    model = Tiny().to(torch.bfloat16)
    missing, unexpected = model.load_state_dict(rest, strict=False)
    assert not unexpected and sorted(missing) == sorted(f"{name}.weight" for name in LAYERS)
    ha.replace_linears(model, ha.load_quantized(tmp_path, progress=False), progress=False)
    x = torch.randn(2, 5, H, generator=torch.Generator().manual_seed(7)).to(torch.bfloat16)
    with torch.no_grad():
        assert rel_err(model(x), ref(x.float())) < 1e-2


def test_unquantized_of_a_packed_checkpoint_points_at_the_source(tmp_path):
    from humming_aot import cli

    (tmp_path / "src").mkdir()
    make_model_and_checkpoint(tmp_path / "src", "gptq")
    assert cli.main(["convert", str(tmp_path / "src"), str(tmp_path / "out"), "--arch", "generic", "--quiet"]) == 0
    with pytest.raises(CheckpointError, match="holds only the quantized layers; read the model's other tensors"):
        ha.load_unquantized(tmp_path / "out")
    with pytest.raises(ValueError, match="load_unquantized of a state dict needs config="):
        ha.load_unquantized({"a": torch.zeros(1)})


def test_one_act_order_layer_exactly(tmp_path):
    """One GPTQ act-order layer against x @ W.T in float32: only the output rounding differs."""
    _, ref, _ = make_model_and_checkpoint(tmp_path, "gptq", seed=3)
    converted = ha.load_quantized(tmp_path, progress=False)
    holder = torch.nn.Module()
    holder.up_proj = torch.nn.Linear(H, I, bias=False).to(torch.bfloat16)
    ha.replace_linears(holder, {"up_proj": converted["model.layers.0.mlp.up_proj"]}, progress=False)
    w = ref.model.layers[0].mlp.up_proj.weight
    x = torch.randn(9, H).to(torch.bfloat16)
    y = holder.up_proj(x)
    assert rel_err(y, x.float() @ w.t()) < 4e-3


def test_state_dict_source_and_ignore(tmp_path):
    """A state dict (no files) with config=; an ignore entry skips a layer even when its quantized
    tensors are there; the model config object form (with quantization_config) works too."""
    g = torch.Generator().manual_seed(5)
    sd = {}
    for name in ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.gate", "lm_head"):
        layer, _ = awq_layer(64, 128, 64, g)
        sd.update({f"{name}.{k}": v for k, v in layer.items()})
    cfg = {
        "quantization_config": {
            "quant_method": "awq",
            "bits": 4,
            "group_size": 64,
            "modules_to_not_convert": ["lm_head", "mlp.gate"],
        }
    }
    got = ha.load_quantized(sd, cfg, progress=False)
    assert list(got) == ["model.layers.0.mlp.gate_proj"]  # "mlp.gate" is whole dotted parts only
    with pytest.raises(ValueError, match="config="):
        ha.load_quantized(sd)


def test_dynamic_negative_pattern_with_qweight_is_an_error():
    g = torch.Generator().manual_seed(6)
    layer, _ = gptq_layer(64, 128, 64, g)
    sd = {f"model.layers.0.mlp.up_proj.{k}": v for k, v in layer.items()}
    cfg = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 64,
        "desc_act": True,
        "sym": False,
        "dynamic": {r"-:.*up_proj": {}},
    }
    with pytest.raises(ConversionError, match="up_proj.*dynamic"):
        ha.load_quantized(sd, cfg, progress=False)


def test_bad_checkpoints_name_file_and_tensor(tmp_path):
    make_model_and_checkpoint(tmp_path, "awq")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    # a tensor the index lists but no shard holds
    index["weight_map"]["model.layers.0.mlp.gate_proj.qweight"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"model-00001-of-00002\.safetensors.*gate_proj\.qweight"):
        ha.load_quantized(tmp_path, progress=False)
    del index["weight_map"]["model.layers.0.mlp.gate_proj.qweight"]
    # a missing tensor: the importer names the layer and the tensor
    del index["weight_map"]["model.layers.1.mlp.up_proj.scales"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConversionError, match=r"model\.layers\.1\.mlp\.up_proj\.scales"):
        ha.load_quantized(tmp_path, progress=False)
    # a truncated shard
    shard = tmp_path / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        ha.load_quantized(tmp_path, progress=False)


def test_replace_linears_strict_leaves_model_untouched(tmp_path):
    model, _, _ = make_model_and_checkpoint(tmp_path, "awq")
    converted = ha.load_quantized(tmp_path, progress=False)
    converted["model.layers.0.mlp.down_proj"], converted["model.layers.0.mlp.up_proj"] = (
        converted["model.layers.0.mlp.up_proj"],
        converted["model.layers.0.mlp.down_proj"],
    )  # wrong shapes
    converted["model.nothing_here"] = converted[LAYERS[0]]
    with pytest.raises(ValueError, match="down_proj.*nothing_here"):
        ha.replace_linears(model, converted, progress=False)
    assert not any(isinstance(m, QuantLinear) for m in model.modules())  # nothing swapped half-way
    swapped = ha.replace_linears(model, converted, strict=False, progress=False)
    assert sorted(swapped) == sorted(set(LAYERS) - {"model.layers.0.mlp.down_proj", "model.layers.0.mlp.up_proj"})


def test_progress_bar_and_iterator(tmp_path, capsys):
    pytest.importorskip("tqdm", reason="tqdm (the convert extra) is not installed")
    model, _, _ = make_model_and_checkpoint(tmp_path, "compressed-tensors")
    ha.replace_linears(model, ha.iter_quantized(tmp_path), progress=True)
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == len(LAYERS)
    assert "importing" in capsys.readouterr().err


def test_no_tqdm_no_bar(tmp_path, monkeypatch, capsys):
    model, _, _ = make_model_and_checkpoint(tmp_path, "awq")
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    ha.replace_linears(model, ha.load_quantized(tmp_path), progress=True)
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == len(LAYERS)
    assert "importing" not in capsys.readouterr().err


def test_missing_safetensors_names_the_extra(tmp_path, monkeypatch):
    make_model_and_checkpoint(tmp_path, "awq")
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors now raises ImportError
    with pytest.raises(ImportError, match=r"humming-aot\[convert\]"):
        ha.load_quantized(tmp_path, progress=False)


def test_in_perm_compiles_fullgraph():
    """QuantLinear with in_perm: one graph under torch.compile(fullgraph=True), the eager result bit
    for bit, and the permutation is really applied (a layer without it differs)."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(9)
    layer, w = gptq_layer(72, 128, 64, g)
    cw = ha.load_quantized(
        {f"l.{k}": v for k, v in layer.items()},
        {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": True, "sym": False},
        progress=False,
    )["l"]
    packed = ha.pack_weight(cw.weight)
    lin = QuantLinear.from_packed(packed, "bf16", in_perm=cw.perm)
    plain = QuantLinear.from_packed(packed, "bf16")
    x = torch.randn(7, 128, generator=g).to(torch.bfloat16)
    eager = lin(x)
    assert torch.equal(eager, torch.compile(lin, fullgraph=True)(x))
    torch._dynamo.reset()
    dyn = torch.compile(lin, fullgraph=True, dynamic=True)
    for m in (5, 16, 1):
        assert torch.equal(dyn(x[:m]), lin(x[:m]))
    assert rel_err(eager, x.float() @ w.t()) < 4e-3
    assert rel_err(plain(x), x.float() @ w.t()) > 0.1
    torch._dynamo.reset()


def test_other_methods_dispatch():
    """The remaining quant_methods reach their importers (each importer's bits are tested in its own
    file): FP8 with 128 x 128 weight_scale_inv, ModelOpt FP8, gpt-oss MXFP4 experts (a list per
    projection, not an nn.Linear), and an unknown method is refused by name."""
    g = torch.Generator().manual_seed(11)
    w8 = (torch.randn(256, 128, generator=g) * 4).to(torch.float8_e4m3fn)
    inv = torch.rand(2, 1, generator=g) + 0.5
    got = ha.load_quantized(
        {"m.a.weight": w8, "m.a.weight_scale_inv": inv, "m.b.weight": torch.ones(4, 4)},
        {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
        progress=False,
    )
    assert list(got) == ["m.a"]  # m.b has no scale: a float layer
    holder = torch.nn.Module()
    holder.m = torch.nn.Module()
    holder.m.a = torch.nn.Linear(128, 256, bias=False).to(torch.bfloat16)
    ha.replace_linears(holder, got, progress=False)
    x = torch.randn(3, 128, generator=g).to(torch.bfloat16)
    want = x.float() @ (w8.float() * inv.repeat_interleave(128, 0)).t()
    assert rel_err(holder.m.a(x), want) < 4e-3

    got = ha.load_quantized(
        {"q.weight": w8, "q.weight_scale": torch.tensor(0.5), "q.input_scale": torch.tensor(1.0)},
        {"quant_method": "modelopt", "quant_algo": "FP8"},
        progress=False,
    )
    assert list(got) == ["q"]

    blocks = torch.randint(0, 256, (3, 64, 4, 16), dtype=torch.uint8, generator=g)
    scales = torch.randint(120, 130, (3, 64, 4), dtype=torch.uint8, generator=g)
    got = ha.load_quantized(
        {
            "model.layers.0.mlp.experts.down_proj_blocks": blocks,
            "model.layers.0.mlp.experts.down_proj_scales": scales,
            "model.layers.0.self_attn.q_proj.weight": torch.ones(4, 4),
        },
        {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]},
        progress=False,
    )
    assert (
        list(got) == ["model.layers.0.mlp.experts.down_proj"] and len(got["model.layers.0.mlp.experts.down_proj"]) == 3
    )

    with pytest.raises(ConversionError, match="quant_method.*'hqq'"):
        ha.load_quantized({}, {"quant_method": "hqq"}, progress=False)


# ---- quantize_model: float models through the reference quantizer --------------------------------


class _Block(torch.nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)  # a fused projection: one weight
        self.up = torch.nn.Linear(d, h)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + self.qkv(x)[..., : x.shape[-1]]


class _Model(torch.nn.Module):
    def __init__(self, d=128, h=256, vocab=96):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Block(d, h) for _ in range(2)])
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return self.lm_head(x)


def _model():
    torch.manual_seed(0)
    return _Model().to(torch.bfloat16)


def test_quantize_model_swaps_every_linear_but_the_head():
    model, ref = _model(), _model()
    x = torch.randn(3, 128).to(torch.bfloat16)
    got = ha.quantize_model(model, "u4g128-sbf16", progress=False)
    expected = {f"layers.{i}.{p}" for i in range(2) for p in ("qkv", "up", "down")}
    assert set(got) == expected
    assert isinstance(model.lm_head, torch.nn.Linear) and type(model.lm_head) is torch.nn.Linear
    for name in expected:
        q = model.get_submodule(name)
        assert isinstance(q, ha.QuantLinear) and q is got[name]
        # The same layer as from_linear on the original linear makes: same codes, same output.
        want = ha.QuantLinear.from_linear(ref.get_submodule(name), "u4g128-sbf16")
        assert torch.equal(q.packed.codes, want.packed.codes)
        xi = torch.randn(2, q.in_features).to(torch.bfloat16)
        assert torch.equal(q(xi), want(xi))
    out = model(x).float()
    full = ref(x).float()
    assert (out - full).norm() / full.norm() < 0.2  # u4 g128 quantization error, not a wrong wiring


def test_quantize_model_skip_patterns():
    model = _model()
    got = ha.quantize_model(model, "u8gc-sbf16", skip=("lm_head", "re:.*\\.down$", "layers.1.q*"), progress=False)
    assert set(got) == {"layers.0.qkv", "layers.0.up", "layers.1.up"}
    assert type(model.layers[0].down) is torch.nn.Linear and type(model.layers[1].qkv) is torch.nn.Linear
    everything = ha.quantize_model(_model(), "u8gc-sbf16", skip=(), progress=False)
    assert "lm_head" in everything and len(everything) == 7


def test_quantize_model_errors_leave_the_model_untouched():
    model = _model()
    with pytest.raises(F.FormatError):
        ha.quantize_model(model, "u4g100-sbf16", progress=False)
    assert all(type(m) is not ha.QuantLinear for m in model.modules())
    with torch.device("meta"):
        model.layers[1].up = torch.nn.Linear(128, 256)
    with pytest.raises(ValueError, match=r"layers\.1\.up .*meta device"):
        ha.quantize_model(model, "u4g128-sbf16", progress=False)
    assert all(type(m) is not ha.QuantLinear for m in model.modules())
    got = ha.quantize_model(model, "u4g128-sbf16", strict=False, progress=False)
    assert "layers.1.up" not in got and len(got) == 5
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ha.quantize_model("not a model", "u4g128-sbf16")


# ---- mixture-of-experts layers (QuantMoE.from_checkpoint) -------------------------------------------

MOE_H, MOE_F, MOE_E = 128, 64, 4  # hidden, intermediate, experts: gate-up [128, 128], down [128, 64]
MOE_CONFIGS = {
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False, "sym": False},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"},
    "compressed-tensors": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 64},
            }
        },
    },
}


def moe_state_dict(method, prefix, names, seed=0, act_order=False):
    """(tensors of one MoE layer's experts, their float32 weights [E, 2F, H] and [E, H, F]); the
    router's float weight is in the tensors too, as checkpoints keep it."""
    g = torch.Generator().manual_seed(seed)
    make = {"gptq": lambda n, k: gptq_layer(n, k, 64, g, act_order), "awq": lambda n, k: awq_layer(n, k, 64, g)}.get(
        method, lambda n, k: ct_layer(n, k, 64, g)
    )
    tensors = {f"{prefix}.gate.weight": torch.randn(MOE_E, MOE_H, generator=g).to(torch.bfloat16)}
    gate_up, down = [], []
    for e in range(MOE_E):
        w = {}
        for proj, (n, k) in zip(names, ((MOE_F, MOE_H), (MOE_F, MOE_H), (MOE_H, MOE_F))):
            layer, w[proj] = make(n, k)
            tensors.update({f"{prefix}.experts.{e}.{proj}.{key}": v for key, v in layer.items()})
        gate_up.append(torch.cat([w[names[0]], w[names[1]]], 0))
        down.append(w[names[2]])
    return tensors, torch.stack(gate_up), torch.stack(down)


def moe_reference(x, logits, gate_up, down, top_k):
    """The layer in fp32 from the float experts: softmax scores, the top k renormalized, each
    chosen expert's silu(gate) * up and down projection weighted by its score."""
    x = x.float()
    weights, ids = torch.softmax(logits.float(), -1).topk(top_k, -1)
    weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros(x.shape[0], gate_up.shape[2])
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            h = gate_up[e] @ x[t]
            gate, up = h[: h.shape[0] // 2], h[h.shape[0] // 2 :]
            out[t] += weights[t, j] * (down[e] @ (torch.nn.functional.silu(gate) * up))
    return out


@pytest.mark.parametrize(
    "method,prefix,names",
    [
        ("gptq", "model.layers.0.mlp", ("gate_proj", "up_proj", "down_proj")),
        ("awq", "model.layers.3.mlp", ("gate_proj", "up_proj", "down_proj")),
        ("compressed-tensors", "model.layers.1.block_sparse_moe", ("w1", "w3", "w2")),
    ],
)
def test_moe_layer_from_a_checkpoint_matches_its_float_experts(method, prefix, names):
    tensors, gate_up, down = moe_state_dict(method, prefix, names)
    # another layer's experts and a dense layer beside them: only this layer's are read
    other, _, _ = moe_state_dict(method, "model.layers.9.mlp", ("gate_proj", "up_proj", "down_proj"), seed=1)
    tensors.update(other)
    moe = ha.QuantMoE.from_checkpoint(tensors, prefix, 2, config={"quantization_config": MOE_CONFIGS[method]})
    assert (moe.num_experts, moe.hidden, moe.intermediate) == (MOE_E, MOE_H, MOE_F)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(9, MOE_H, generator=g).to(torch.bfloat16)
    logits = torch.randn(9, MOE_E, generator=g)
    got = moe(x, logits)
    want = moe_reference(x, logits, gate_up, down, 2)
    assert got.shape == (9, MOE_H)
    assert rel_err(got, want) < 2e-2
    # a wrong gate / up order (or expert order) is off by the size of the output
    swapped = torch.cat([gate_up[:, MOE_F:], gate_up[:, :MOE_F]], 1)
    assert rel_err(got, moe_reference(x, logits, swapped, down, 2)) > 0.3


def test_moe_checkpoint_directory_is_read_like_a_state_dict(tmp_path):
    from humming_aot import cli

    tensors, gate_up, down = moe_state_dict("gptq", "model.layers.0.mlp", ("gate_proj", "up_proj", "down_proj"))
    (tmp_path / "src").mkdir()
    write_checkpoint(tmp_path / "src", tensors, MOE_CONFIGS["gptq"])
    moe = ha.QuantMoE.from_checkpoint(tmp_path / "src", "model.layers.0.mlp", 1)
    x, logits = torch.randn(5, MOE_H).to(torch.bfloat16), torch.randn(5, MOE_E)
    assert rel_err(moe(x, logits), moe_reference(x, logits, gate_up, down, 1)) < 2e-2
    # a packed checkpoint has each projection packed apart: refused, pointing at the source
    assert cli.main(["convert", str(tmp_path / "src"), str(tmp_path / "out"), "--arch", "generic", "--quiet"]) == 0
    with pytest.raises(CheckpointError, match="packed checkpoint .* read the experts from the source checkpoint"):
        ha.QuantMoE.from_checkpoint(tmp_path / "out", "model.layers.0.mlp", 1)


def test_moe_checkpoint_errors_name_the_expert():
    names = ("gate_proj", "up_proj", "down_proj")
    cfg = {"quantization_config": MOE_CONFIGS["gptq"]}
    tensors, _, _ = moe_state_dict("gptq", "model.layers.0.mlp", names)
    with pytest.raises(CheckpointError, match=r"no tensor starts with 'model\.layers\.0\.moe\.experts\.'"):
        ha.QuantMoE.from_checkpoint(tensors, "model.layers.0.moe", 2, config=cfg)
    partial = {k: v for k, v in tensors.items() if ".experts.2.down_proj." not in k}
    with pytest.raises(CheckpointError, match=r"model\.layers\.0\.mlp\.experts\.2\.down_proj"):
        ha.QuantMoE.from_checkpoint(partial, "model.layers.0.mlp", 2, config=cfg)
    ordered, _, _ = moe_state_dict("gptq", "model.layers.0.mlp", names, act_order=True)
    with pytest.raises(CheckpointError, match="act-order"):
        ha.QuantMoE.from_checkpoint(ordered, "model.layers.0.mlp", 2, config=cfg)
    renamed = {k.replace(".up_proj.", ".up."): v for k, v in tensors.items()}
    with pytest.raises(CheckpointError, match="gate_proj/up_proj/down_proj"):
        ha.QuantMoE.from_checkpoint(renamed, "model.layers.0.mlp", 2, config=cfg)
    # gpt-oss keeps every expert in one tensor per projection: both projections are needed
    fused = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks": torch.zeros(4, 128, 4, 16, dtype=torch.uint8),
        "model.layers.0.mlp.experts.gate_up_proj_scales": torch.full((4, 128, 4), 127, dtype=torch.uint8),
    }
    with pytest.raises(CheckpointError, match=r"experts\.down_proj is missing .* gpt-oss experts need"):
        ha.QuantMoE.from_checkpoint(fused, "model.layers.0.mlp", 2, config={"quant_method": "mxfp4"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_moe_checkpoint_on_the_gpu_matches_its_float_experts():
    import warnings

    names = ("gate_proj", "up_proj", "down_proj")
    tensors, gate_up, down = moe_state_dict("gptq", "model.layers.0.mlp", names)
    cfg = {"quantization_config": MOE_CONFIGS["gptq"]}
    with warnings.catch_warnings():
        # GPTQ's f16 scales may be rounded to bf16 (warned), and the per-expert loop warns once
        warnings.simplefilter("ignore")
        moe = ha.QuantMoE.from_checkpoint(tensors, "model.layers.0.mlp", 2, config=cfg, device="cuda")
        g = torch.Generator().manual_seed(5)
        x = torch.randn(33, MOE_H, generator=g).to(torch.bfloat16)
        logits = torch.randn(33, MOE_E, generator=g)
        got = moe(x.cuda(), logits.cuda())
    assert got.is_cuda and got.shape == (33, MOE_H)
    assert rel_err(got.cpu(), moe_reference(x, logits, gate_up, down, 2)) < 2e-2


def test_deepseek_fp8_block_experts_run_as_w8a8_blocks():
    """DeepSeek-V3-style FP8 experts (e4m3 weights, a float32 scale per 128 x 128 block) with FP8
    activations in 1 x 128 groups: the W8A8 block format through the grouped GEMMs (on the CPU the
    reference's; on an sm90 GPU the grouped FP8 kernels of tools/matrix/sm90_a8_moe.json)."""
    g = torch.Generator().manual_seed(7)
    E, H, Fi = 3, 256, 128  # gate and up [128, 256]: whole 128-row blocks each, so they stack
    prefix = "model.layers.3.mlp"
    tensors, gate_up, down = {}, [], []

    def fp8_layer(n, k):
        raw = torch.randint(0, 256, (n, k), generator=g, dtype=torch.int64)
        raw[(raw & 0x7F) == 0x7F] = 0x38  # e4m3fn's NaN patterns -> 1.0
        weight = raw.to(torch.uint8).view(torch.float8_e4m3fn)
        s = torch.rand(n // 128, k // 128, generator=g) * 1e-2 + 1e-3
        return weight, s, weight.float() * s.repeat_interleave(128, 0).repeat_interleave(128, 1)

    for e in range(E):
        w = []
        for proj, (n, k) in zip(("gate_proj", "up_proj", "down_proj"), ((Fi, H), (Fi, H), (H, Fi))):
            weight, s, dense = fp8_layer(n, k)
            tensors[f"{prefix}.experts.{e}.{proj}.weight"] = weight
            tensors[f"{prefix}.experts.{e}.{proj}.weight_scale_inv"] = s
            w.append(dense)
        gate_up.append(torch.cat(w[:2], 0))
        down.append(w[2])
    cfg = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    bias = torch.randn(E, generator=g)
    tensors[f"{prefix}.gate.e_score_correction_bias"] = bias  # the router's, read with the experts
    routed = ha.QuantMoE.from_checkpoint(tensors, prefix, 2, config=cfg, act_format="e4m3-g128", scoring="sigmoid")
    assert torch.equal(routed.correction_bias, bias)
    # the reference below routes by softmax without the correction: given as None, none is taken
    moe = ha.QuantMoE.from_checkpoint(tensors, prefix, 2, config=cfg, act_format="e4m3-g128", correction_bias=None)
    assert moe.correction_bias is None and str(moe.gate_up[0].fmt.weight) == "e4m3g128n128-sf32"
    x = torch.randn(6, H, generator=g).to(torch.bfloat16)
    logits = torch.randn(6, E, generator=g)
    want = moe_reference(x, logits, torch.stack(gate_up), torch.stack(down), 2)
    # FP8 activations round each input to 3 mantissa bits (before both GEMMs), so the bound is
    # looser than for 16-bit activations (measured 0.039); a wrong order is off by far more
    assert moe._grouped_on(x)
    got = moe(x, logits)
    assert rel_err(got, want) < 6e-2
    swapped = [torch.cat([w[Fi:], w[:Fi]], 0) for w in gate_up]
    assert rel_err(got, moe_reference(x, logits, torch.stack(swapped), torch.stack(down), 2)) > 0.3


FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def mxfp4_experts(E, N, K, g):
    """gpt-oss MXFP4 tensors of E experts' [N, K] weights (blocks [E, N, K / 32, 16]: input 32 g + 2 j
    the low nibble of byte j of group g, 32 g + 2 j + 1 its high nibble; e8m0 scales [E, N, K / 32])
    and their float values [E, N, K]."""
    codes = torch.randint(0, 16, (E, N, K), generator=g)
    scales = torch.randint(120, 130, (E, N, K // 32), generator=g)
    pairs = codes.reshape(E, N, K // 32, 16, 2)
    blocks = (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)
    values = torch.tensor(FP4)[codes] * torch.exp2(scales.float() - 127).repeat_interleave(32, -1)
    return blocks, scales.to(torch.uint8), values


def test_gpt_oss_experts_with_their_biases_and_clamped_swiglu():
    """gpt-oss's experts: every expert in one MXFP4 tensor per projection, gate and up rows
    interleaved, biases, and its SwiGLU ((up + 1) * gate * sigmoid(1.702 gate), gate clamped at 7,
    up to [-7, 7]); the reference below applies all of it in the checkpoint's own row order."""
    g = torch.Generator().manual_seed(11)
    E, H, Fi, p = 4, 64, 32, "model.layers.0.mlp"
    gu_blocks, gu_scales, gu = mxfp4_experts(E, 2 * Fi, H, g)
    dn_blocks, dn_scales, dn = mxfp4_experts(E, H, Fi, g)
    gu_bias = (torch.randn(E, 2 * Fi, generator=g) * 4).to(torch.bfloat16)  # some gates past the clamp
    dn_bias = torch.randn(E, H, generator=g).to(torch.bfloat16)
    tensors = {
        f"{p}.experts.gate_up_proj_blocks": gu_blocks,
        f"{p}.experts.gate_up_proj_scales": gu_scales,
        f"{p}.experts.gate_up_proj_bias": gu_bias,
        f"{p}.experts.down_proj_blocks": dn_blocks,
        f"{p}.experts.down_proj_scales": dn_scales,
        f"{p}.experts.down_proj_bias": dn_bias,
        f"{p}.router.weight": torch.randn(E, H, generator=g).to(torch.bfloat16),
    }
    moe = ha.QuantMoE.from_checkpoint(tensors, p, 2, config={"quant_method": "mxfp4"})
    assert moe.activation == "swiglu-oai" and str(moe.gate_up[0].fmt.weight) == "e2m1g32-se8m0"
    x = torch.randn(7, H, generator=g).to(torch.bfloat16)
    logits = torch.randn(7, E, generator=g)
    top, ids = logits.topk(2, -1)
    weights = torch.softmax(top, -1)  # gpt-oss: softmax over the chosen logits
    want = torch.zeros(7, H)
    for t in range(7):
        for j in range(2):
            e = int(ids[t, j])
            h = gu[e] @ x[t].float() + gu_bias[e].float()
            gate, up = h[0::2].clamp(max=7.0), h[1::2].clamp(-7.0, 7.0)
            act = (up + 1) * gate * torch.sigmoid(1.702 * gate)
            want[t] += weights[t, j] * (dn[e] @ act.to(torch.bfloat16).float() + dn_bias[e].float())
    got = moe(x, logits)
    assert rel_err(got, want) < 2e-2
    # the per-expert loop (what a GPU without grouped kernels for the format runs) adds the same biases
    moe._grouped_on = lambda x: False
    assert rel_err(moe(x, logits), want) < 2e-2
    # with the plain silu it is another function
    plain = ha.QuantMoE.from_checkpoint(tensors, p, 2, config={"quant_method": "mxfp4"}, activation="silu")
    assert rel_err(plain(x, logits), want) > 0.1
    with pytest.raises(ValueError, match="activation must be one of silu, swiglu-oai"):
        ha.QuantMoE.from_checkpoint(tensors, p, 2, config={"quant_method": "mxfp4"}, activation="gelu")
    with pytest.raises(ValueError, match=r"gate_up_bias must be a tensor \[experts, outputs\] = \[4, 64\]"):
        ha.QuantMoE.from_checkpoint(tensors, p, 2, config={"quant_method": "mxfp4"}, gate_up_bias=torch.zeros(4, 32))
