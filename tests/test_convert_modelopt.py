"""ModelOpt importer (humming_aot.convert.modelopt) against synthetic checkpoints.

Conventions from NVIDIA TensorRT-Model-Optimizer (``modelopt/torch/quantization/qtensor/
nvfp4_tensor.py``): NVFP4 ``weight`` uint8 [N, K/2] packed ``(q[..., 1::2] << 4) | q[..., 0::2]``
(element 2j in the low nibble), ``weight_scale`` float8_e4m3fn [N, K/16], ``weight_scale_2`` float32
per tensor; value ``e2m1 * weight_scale * weight_scale_2`` (it multiplies). FP8: ``weight``
float8_e4m3fn, ``weight_scale`` float32 per tensor or per channel, value ``fp8 * weight_scale``.
The packer works on Python integers; expected weights are the formulas in float64 (exact here),
rounded once to float32.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.convert import ConversionError, modelopt

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def pack_fp4(codes):
    return torch.tensor(
        [[r[2 * j] | (r[2 * j + 1] << 4) for j in range(len(r) // 2)] for r in codes.tolist()], dtype=torch.uint8
    )


def rand_fp8_bytes(shape, g, positive=False):
    b = torch.randint(0, 128 if positive else 256, shape, generator=g, dtype=torch.int64)
    b[(b & 0x7F) == 0x7F] = 0x38
    return b.to(torch.uint8)


def make_nvfp4(N, K, seed):
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (N, K), generator=g, dtype=torch.int64)
    sbytes = rand_fp8_bytes((N, -(-K // 16)), g, positive=True)
    s2 = torch.tensor(1.7 / (6 * 448), dtype=torch.float32)
    vals = torch.tensor([[E2M1[c] for c in r] for r in codes.tolist()], dtype=torch.float64)
    expected = (vals * sbytes.view(torch.float8_e4m3fn).double()[:, torch.arange(K) // 16] * s2.double()).float()
    return (
        {
            "weight": pack_fp4(codes),
            "weight_scale": sbytes.view(torch.float8_e4m3fn),
            "weight_scale_2": s2,
            "input_scale": torch.tensor(0.05),
        },
        codes.to(torch.uint8),
        sbytes,
        expected,
    )


@pytest.mark.parametrize("N,K", [(32, 64), (24, 40), (16, 16)])  # K = 40: partial last group
def test_modelopt_nvfp4(N, K):
    t, codes, sbytes, expected = make_nvfp4(N, K, seed=N + K)
    p = "model.layers.4.mlp.gate_proj"
    cfg = {"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}}
    res = modelopt.convert_layer({f"{p}.{k}": v for k, v in t.items()}, p, cfg)
    w = res.weight
    assert str(w.fmt) == "e2m1g16-se4m3-gs" and res.source == "modelopt_nvfp4"
    assert torch.equal(w.codes, codes) and torch.equal(w.scales.view(torch.uint8), sbytes)
    assert torch.equal(w.global_scale, t["weight_scale_2"])
    assert torch.equal(R.dequantize_weight(w), expected)
    assert float(modelopt.activation_scale({f"{p}.{k}": v for k, v in t.items()}, p)) == pytest.approx(0.05)


def test_modelopt_nibble_order_by_hand():
    # byte 0x7A: element 0 = code 0xA (-1.0), element 1 = code 7 (6.0)
    res = modelopt.convert_nvfp4(
        torch.tensor([[0x7A] * 8]).to(torch.uint8), torch.ones(1, 1).to(torch.float8_e4m3fn), torch.tensor(1.0)
    )
    assert R.dequantize_weight(res.weight)[0, :2].tolist() == [-1.0, 6.0]


@pytest.mark.parametrize("per_channel", [False, True])
def test_modelopt_fp8(per_channel):
    g = torch.Generator().manual_seed(3)
    N, K = 40, 72
    raw = rand_fp8_bytes((N, K), g)
    s = torch.rand(N, generator=g) * 0.01 + 1e-4 if per_channel else torch.tensor(0.0037)
    cfg = {"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN" if per_channel else "FP8"}
    res = modelopt.convert_layer(
        {"m.weight": raw.view(torch.float8_e4m3fn), "m.weight_scale": s, "m.input_scale": torch.tensor(0.1)}, "m", cfg
    )
    w = res.weight
    assert str(w.fmt) == "e4m3gc-sf32" and torch.equal(w.codes, raw)
    sn = s.reshape(-1, 1).expand(N, 1).double()
    assert torch.equal(R.dequantize_weight(w), (raw.view(torch.float8_e4m3fn).double() * sn).float())


def raises(match, fn, *args, **kwargs):
    with pytest.raises(ConversionError, match=match) as info:
        fn(*args, **kwargs)
    return info.value


def test_modelopt_errors():
    t, *_ = make_nvfp4(16, 32, seed=4)
    tensors = {f"p.{k}": v for k, v in t.items()}
    raises(r"layer 'p': quant_algo = 'NVFP4_AWQ'", modelopt.convert_layer, tensors, "p", {"quant_algo": "NVFP4_AWQ"})
    raises(r"quant_algo = None", modelopt.convert_layer, tensors, "p", {})
    raises(r"quant_method = 'awq'", modelopt.convert_layer, tensors, "p", {"quant_method": "awq", "quant_algo": "FP8"})
    raises(
        r"p.pre_quant_scale = .*fold it into the previous layer",
        modelopt.convert_layer,
        dict(tensors, **{"p.pre_quant_scale": torch.ones(32)}),
        "p",
        {"quant_algo": "NVFP4"},
    )
    raises(
        r"p.weight_scale_2 = None: the tensor is missing",
        modelopt.convert_layer,
        {k: v for k, v in tensors.items() if not k.endswith("_2")},
        "p",
        {"quant_algo": "NVFP4"},
    )
    raises(
        r"weight_scale.dtype = torch.float32: expected float8_e4m3fn",
        modelopt.convert_nvfp4,
        t["weight"],
        t["weight_scale"].float(),
        t["weight_scale_2"],
    )
    raises(
        r"weight_scale.shape = \[16, 1\]",
        modelopt.convert_nvfp4,
        t["weight"],
        t["weight_scale"][:, :1],
        t["weight_scale_2"],
    )
    raises(
        r"weight_scale_2 = .*a per-tensor scale must be a positive finite",
        modelopt.convert_nvfp4,
        t["weight"],
        t["weight_scale"],
        torch.tensor(-1.0),
    )
    raises(
        r"group_size = 32", modelopt.convert_nvfp4, t["weight"], t["weight_scale"], t["weight_scale_2"], group_size=32
    )
    w8 = torch.zeros(8, 16).to(torch.float8_e4m3fn)
    raises(r"weight_scale.shape = \[3\]: expected one value", modelopt.convert_fp8, w8, torch.ones(3))
    raises(r"weight.dtype = torch.uint8: expected float8", modelopt.convert_fp8, t["weight"], torch.tensor(1.0))
