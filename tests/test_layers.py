"""CPU tests of humming_aot.layers.QuantLinear.

On the CPU, ``forward`` runs torch.ops.humming.gemm's CPU kernel on the packed weight. It is compared
with humming_aot.reference: the same weight quantized with ``reference.quantize_weight`` and
multiplied with ``reference.gemm`` (float32 in a different summation order, then rounded to the output
type). Tolerance, per output element: one ulp of the output type at the larger of the two magnitudes
(both sides round a float32 sum to bf16 / f16) plus the float32 summation-order bound
2 * K * 2**-24 * (|A| @ |W|.T + |bias|), computed in float64 from the dequantized operands.

Unsigned weight codes without a zero point (u4g128-sbf16) are left out of the comparisons: formats.py
defines their implied zero point 2**(bits-1), which the CPU kernel applies but reference.py's quantizer
and dequantizer do not yet; i4g128-sbf16 takes the symmetric 4-bit slot here.
"""

import pytest
import torch

from humming_aot import reference as R
from humming_aot.layers import QuantLinear
from humming_aot.pack import pack_weight

U32 = 2.0**-24
MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}

WEIGHT_FORMATS = [
    "i4g128-sbf16",
    "u4g64-sbf16-zi",
    "u4g64-sbf16-zf",
    "i8gc-sbf16",
    "e2m1g32-se8m0",  # MXFP4
    "e2m1g16-se4m3-gs",  # NVFP4
    "e4m3g128n128-sf32",  # FP8 block scales
    "e4m3",  # FP8 without scales: bf16 activations take it too
]


def linear(k, n, *, bias=True, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Linear(k, n, bias=bias, dtype=dtype)


def acts(shape, seed, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype``'s values at magnitude |x| (float64; the subnormal spacing near 0)."""
    # |x| = f * 2**e with f in [0.5, 1): the binade is 2**(e-1), the spacing 2**(e-1-man); below the
    # smallest normal number the spacing stays that of the lowest binade.
    _, e = torch.frexp(x.abs().double().clamp(min=torch.finfo(dtype).tiny))
    return torch.exp2((e - 1 - MANTISSA[dtype]).double())


def assert_close_to_reference(y, ref, a_vals, w_vals, bias=None):
    """|y - ref| <= 1 ulp(out) + 2 K u32 (|A| |W|^T + |bias|), elementwise."""
    assert y.dtype == ref.dtype and y.shape == ref.shape
    K = a_vals.shape[1]
    mag = a_vals.double().abs() @ w_vals.double().abs().T
    if bias is not None:
        mag = mag + bias.double().abs()
    bound = ulp(torch.maximum(y.double().abs(), ref.double().abs()), y.dtype) + 2 * K * U32 * mag
    diff = (y.double() - ref.double()).abs()
    worst = (diff - bound).max().item()
    assert worst <= 0, f"difference exceeds the bound by {worst:.3g} (max diff {diff.max().item():.3g})"


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_forward_matches_reference(fmt):
    lin = linear(256, 96, bias=False, seed=1)
    layer = QuantLinear.from_linear(lin, fmt)
    assert str(layer.fmt) == f"a-bf16_w-{fmt}_c-bf16"
    x = acts((5, 256), seed=2)
    q = R.quantize_weight(lin.weight.detach().float(), fmt)
    y = layer(x)
    ref = R.gemm(x, q, "bf16", None, torch.bfloat16)
    assert_close_to_reference(y, ref, x.float(), R.dequantize_weight(q))
    # The layer really computes the quantized product, not the float one.
    assert not torch.equal(y, lin(x.float()).to(torch.bfloat16))


def test_odd_shapes_and_f16_layer():
    # K and N not multiples of the group size or any tile; an f16 nn.Linear gives f16 activations/output.
    lin = linear(200, 37, seed=3, dtype=torch.float16)
    layer = QuantLinear.from_linear(lin, "u4g64-sf16-zi")
    assert str(layer.fmt) == "a-f16_w-u4g64-sf16-zi_c-f16"
    x = acts((3, 200), seed=4, dtype=torch.float16)
    q = R.quantize_weight(lin.weight.detach().float(), "u4g64-sf16-zi")
    bias = lin.bias.detach()
    y = layer(x)
    ref = R.gemm(x, q, "f16", None, torch.float16, bias)
    assert_close_to_reference(y, ref, x.float(), R.dequantize_weight(q), bias)


def test_leading_batch_dims_are_kept():
    lin = linear(128, 48, seed=5)
    layer = QuantLinear.from_linear(lin, "i4g128-sbf16")
    x = acts((2, 3, 128), seed=6)
    y = layer(x)
    assert y.shape == (2, 3, 48)
    flat = layer(x.reshape(6, 128))
    assert torch.equal(y.reshape(6, 48), flat)
    # Row (i, j) of the output is the layer applied to row (i, j) of the input.
    assert torch.equal(y[1, 2], layer(x[1, 2].reshape(1, 128))[0])
    assert layer(x[0]).shape == (3, 48)


def test_bias_is_added():
    lin = linear(128, 40, seed=7)
    with torch.no_grad():
        lin.bias.copy_(torch.linspace(-4, 4, 40))  # large enough to be visible after bf16 rounding
    layer = QuantLinear.from_linear(lin, "i8gc-sbf16")
    no_bias = QuantLinear.from_linear(linear(128, 40, bias=False, seed=7), "i8gc-sbf16")
    x = acts((4, 128), seed=8)
    q = R.quantize_weight(lin.weight.detach().float(), "i8gc-sbf16")
    bias = lin.bias.detach().to(torch.bfloat16)  # the layer keeps the bias in the output type
    y = layer(x)
    assert_close_to_reference(
        y, R.gemm(x, q, "bf16", None, torch.bfloat16, bias), x.float(), R.dequantize_weight(q), bias
    )
    # Against the same layer without bias: the difference is the bias (up to bf16 rounding of the sums).
    d = y.float() - no_bias(x).float()
    tol = ulp(y.float(), torch.bfloat16) + ulp(no_bias(x).float(), torch.bfloat16)
    assert bool(((d - bias.float()).abs() <= tol).all())


def test_wrong_in_features_is_refused():
    layer = QuantLinear.from_linear(linear(128, 32), "i4g128-sbf16")
    with pytest.raises(ValueError, match="input has 100 features; this layer takes 128"):
        layer(acts((2, 100), seed=0))


def test_wrong_activation_dtype_is_refused():
    layer = QuantLinear.from_linear(linear(128, 32), "i4g128-sbf16")
    with pytest.raises(TypeError, match=r"this layer takes torch\.bfloat16 activations \(bf16\); got torch\.float32"):
        layer(acts((2, 128), seed=0, dtype=torch.float32))


def test_from_linear_takes_only_linear():
    with pytest.raises(TypeError, match="from_linear takes a torch.nn.Linear, got Conv1d"):
        QuantLinear.from_linear(torch.nn.Conv1d(4, 4, 1), "i4g128-sbf16")


def test_quantized_activations_match_reference():
    lin = linear(256, 64, seed=9)
    layer = QuantLinear.from_linear(lin, "e4m3gc-sf32", act_format="e4m3-pt")
    assert str(layer.fmt) == "a-e4m3-pt_w-e4m3gc-sf32_c-bf16"
    x = acts((6, 256), seed=10)
    a_codes, a_scales = R.quantize_activation(x, "e4m3-pt")
    q = R.quantize_weight(lin.weight.detach().float(), "e4m3gc-sf32")
    bias = lin.bias.detach().to(torch.bfloat16)
    y = layer(x)
    ref = R.gemm(a_codes, q, "e4m3-pt", a_scales, torch.bfloat16, bias)
    a_vals = R.dequantize_activation(a_codes, a_scales, "e4m3-pt")
    assert_close_to_reference(y, ref, a_vals, R.dequantize_weight(q), bias)
    # Quantizing x matters: the result differs from the bf16-activation product of the same weight.
    unquantized = R.gemm(x, q, "bf16", None, torch.bfloat16, bias)
    assert not torch.equal(y, unquantized)


def test_state_dict_round_trip():
    fmt = "u4g64-sbf16-zi"
    src = QuantLinear.from_linear(linear(192, 80, seed=11), fmt)
    # A fresh layer of the same format and shape, built from another packed weight.
    other = R.quantize_weight(torch.randn(80, 192, generator=torch.Generator().manual_seed(12)), fmt)
    fresh = QuantLinear.from_packed(pack_weight(other), "bf16", bias=torch.zeros(80))
    x = acts((3, 192), seed=13)
    assert not torch.equal(fresh(x), src(x))
    fresh.load_state_dict(src.state_dict())
    assert torch.equal(fresh(x), src(x))
    assert fresh.fmt == src.fmt


def test_instance_for_on_cpu_is_the_reference():
    layer = QuantLinear.from_linear(linear(128, 32), "i4g128-sbf16")
    assert layer.instance_for(1, "cpu") == "cpu-reference"
    assert layer.instance_for(4096, torch.device("cpu")) == "cpu-reference"
    assert layer.instance_for(8) == "cpu-reference"  # the weight lives on the CPU


# ---- the eager path without the dispatcher ------------------------------------------------------


class _CountingDirect:
    """Stands in for humming_aot._C.gemm_eager and counts the calls that reach it."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args):
        self.calls += 1
        return self.real(*args)


@pytest.fixture
def direct(monkeypatch):
    from humming_aot import layers

    # Under a torch other than the build's there is no direct path (humming_aot._eager is tied to
    # that torch); the routing is then checked with the op itself standing in, which takes the same
    # arguments.
    counting = _CountingDirect(layers._DIRECT or torch.ops.humming.gemm)
    monkeypatch.setattr(layers, "_DIRECT", counting)
    return counting


def test_eager_calls_skip_the_dispatcher_with_the_same_result(direct, monkeypatch):
    from humming_aot import layers

    layer = QuantLinear.from_linear(linear(256, 72), "u4g64-sbf16-zf")
    x = acts((5, 256), 40)
    y = layer(x)
    assert direct.calls == 1
    monkeypatch.setattr(layers, "_DIRECT", None)  # what HUMMING_EAGER_OPS=1 does
    assert torch.equal(layer(x), y)
    with torch.inference_mode():
        monkeypatch.setattr(layers, "_DIRECT", direct)
        assert torch.equal(layer(x), y)
    assert direct.calls == 2


def test_quantized_activations_take_one_direct_call_with_the_ops_result(monkeypatch):
    """Eager layers with 8-bit activations quantize and multiply in one call without the dispatcher
    (humming_aot._eager.quantize_gemm_eager) where the build's torch runs; the result equals
    quantize_act then gemm through torch.ops, bitwise, and bad input gets the ops' errors."""
    from humming_aot import layers

    layer = QuantLinear.from_linear(linear(256, 72, bias=True), "e4m3gc-sf32", act_format="e4m3-pt")
    x = acts((5, 256), 41)
    b = layer._buffers
    a, a_scales = torch.ops.humming.quantize_act(x, "e4m3-pt")
    via_ops = torch.ops.humming.gemm(
        a, b["codes"], b["scales"], b["zeros"], b["global_scale"], a_scales, b["bias"],
        layer._fmt_str, layer.layout, 72, 256, "",
    )  # fmt: skip
    fused = layers._DIRECT_QUANTIZE
    calls = []

    def counting(*args):
        calls.append(args[0])
        return (fused or _ops_pair)(*args)

    monkeypatch.setattr(layers, "_DIRECT_QUANTIZE", counting)
    y = layer(x)
    assert calls and calls[-1] is x and torch.equal(y, via_ops)
    y3 = layer(x.reshape(5, 1, 256))
    assert y3.shape == (5, 1, 72) and torch.equal(y3.reshape(5, 72), via_ops)
    monkeypatch.setattr(layers, "_DIRECT_QUANTIZE", None)  # the two ops, as HUMMING_EAGER_OPS=1
    assert torch.equal(layer(x), via_ops)
    if fused is not None:  # the direct call's own errors
        with pytest.raises(ValueError, match="activations to quantize must be float32, float16 or bfloat16"):
            fused(x.to(torch.int32), b["codes"], b["scales"], b["zeros"], b["global_scale"], b["bias"],
                  "e4m3-pt", layer._fmt_str, layer.layout, 72, 256, "")  # fmt: skip
        with pytest.raises(ValueError, match="not quantized"):
            fused(x, b["codes"], b["scales"], b["zeros"], b["global_scale"], b["bias"],
                  "bf16", layer._fmt_str, layer.layout, 72, 256, "")  # fmt: skip


def _ops_pair(a, codes, scales, zeros, global_scale, bias, act, fmt, layout, n, k, instance):
    """quantize_act then gemm through torch.ops: what quantize_gemm_eager does in one call, standing
    in where the running torch has no direct path."""
    q, s = torch.ops.humming.quantize_act(a, act)
    return torch.ops.humming.gemm(q, codes, scales, zeros, global_scale, s, bias, fmt, layout, n, k, instance)


def test_dispatch_modes_and_autograd_still_see_the_op(direct):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    layer = QuantLinear.from_linear(linear(256, 72), "i4g128-sbf16")
    x = acts((3, 256), 41)
    with Record() as mode:
        y = layer(x)
    assert any("humming.gemm" in op for op in mode.ops), mode.ops
    assert direct.calls == 0
    # Inputs that need autograd go through the dispatcher too (which decides what that means).
    xg = x.clone().requires_grad_(True)
    try:
        layer(xg)
    except RuntimeError:
        pass
    assert direct.calls == 0
    assert torch.equal(layer(x), y) and direct.calls == 1
