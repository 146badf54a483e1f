"""CPU tests of inputs as nn.Linear takes them: strided, transposed, overlapping and unaligned
activations work, copied only when the kernel needs it (humming_aot.ops.activation_operand), and
M = 0 gives an empty result. Every result is compared bit for bit with the same layer on a
contiguous copy of the input: the kernels see the same values either way.
"""

from __future__ import annotations

import pytest
import torch

import humming_aot as ha
from humming_aot import layers
from humming_aot import reference as R
from humming_aot.layers import QuantLinear
from humming_aot.ops import activation_operand

K, N = 128, 40


def _layer(wfmt="u4g128-sbf16", act=None, seed=0):
    torch.manual_seed(seed)
    return QuantLinear.from_linear(torch.nn.Linear(K, N), wfmt, act_format=act)


def _randn(*shape, seed=0, dtype=torch.bfloat16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


class _Recorder:
    """Stands in for humming_aot._C.gemm_eager and keeps the activations each call passed."""

    def __init__(self, real):
        self.real, self.seen = real, []

    def __call__(self, a, *args):
        self.seen.append(a)
        return self.real(a, *args)


@pytest.fixture
def recorder(monkeypatch):
    # (the op stands in where the running torch has no direct path: see test_layers.direct)
    rec = _Recorder(layers._DIRECT or torch.ops.humming.gemm)
    monkeypatch.setattr(layers, "_DIRECT", rec)
    return rec


def _views():
    """(name, activations [5, K] as a view, whether the kernels read it in place)."""
    wide = _randn(5, K + 24, seed=1)
    unaligned = _randn(5 * K + 1, seed=2)[1:].view(5, K)
    return [
        ("transposed", _randn(K, 5, seed=3).T, False),
        ("every other column", _randn(5, 2 * K, seed=4)[:, ::2], False),
        ("rows of a wider tensor", wide[:, 8 : 8 + K], True),  # row stride K + 24 >= K, unit column stride
        ("expanded row", _randn(1, K, seed=5).expand(5, K), False),  # row stride 0: rows overlap
        ("unaligned start", unaligned, True),  # the CPU reference needs no alignment
        ("every other row", _randn(10, K, seed=6)[::2], True),
    ]


@pytest.mark.parametrize("name,x,in_place", _views(), ids=[v[0] for v in _views()])
def test_strided_views_match_contiguous_and_copy_only_when_needed(recorder, name, x, in_place):
    layer = _layer()
    want = layer(x.contiguous())
    got = layer(x)
    assert torch.equal(got, want), name
    passed = recorder.seen[-1]
    assert (passed.data_ptr() == x.data_ptr()) == in_place, (name, passed.stride())
    if not in_place:
        assert passed.is_contiguous()


@pytest.mark.parametrize("name,x,in_place", _views(), ids=[v[0] for v in _views()])
def test_strided_views_through_the_dispatcher_and_gemm(monkeypatch, name, x, in_place):
    """The same views through torch.ops (HUMMING_EAGER_OPS=1's path) and humming_aot.gemm."""
    layer = _layer(seed=1)
    monkeypatch.setattr(layers, "_DIRECT", None)
    assert torch.equal(layer(x), layer(x.contiguous())), name
    p = layer.packed
    assert torch.equal(ha.gemm(x, p, layer.fmt, bias=layer.bias), layer(x.contiguous())), name


def test_quantized_activation_layer_takes_a_transposed_input():
    layer = _layer("e4m3gc-sf32", act="e4m3-pt", seed=2)
    x = _randn(K, 6, seed=7).T
    assert torch.equal(layer(x), layer(x.contiguous()))


def test_permuted_3d_input():
    layer = _layer(seed=3)
    x = _randn(4, 3, K, seed=8).transpose(0, 1)  # [3, 4, K], not viewable as [12, K]
    y = layer(x)
    assert y.shape == (3, 4, N)
    assert torch.equal(y, layer(x.contiguous()))


def test_activation_operand_rules():
    a = _randn(4, K, seed=9)
    assert activation_operand(a, False) is a and activation_operand(a, True) is a
    # Row stride 130: every kernel reads it, a fast one needs a multiple of 8 elements (16-byte rows).
    odd_rows = _randn(4, 130, seed=10)[:, :K]
    assert activation_operand(odd_rows, False) is odd_rows
    fixed = activation_operand(odd_rows, True)
    assert fixed.is_contiguous() and torch.equal(fixed, odd_rows)
    # A contiguous tensor two bytes past a 16-byte boundary: copied for a fast kernel only.
    buf = _randn(4 * K + 8, seed=11)
    base = (16 - buf.data_ptr() % 16) % 16 // 2  # elements up to the next 16-byte boundary
    shifted = buf[base + 1 : base + 1 + 4 * K].view(4, K)
    assert shifted.data_ptr() % 16 == 2
    assert activation_operand(shifted, False) is shifted
    moved = activation_operand(shifted, True)
    assert moved.data_ptr() % 16 == 0 and torch.equal(moved, shifted)
    # One row: its row stride is never read.
    row = _randn(1, K, seed=12).as_strided((1, K), (3, 1))
    assert activation_operand(row, False) is row


# ---- M = 0 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("wfmt,act", [("u4g128-sbf16", None), ("u8gc-sbf16-zi", None), ("e4m3gc-sf32", "e4m3-pt")])
def test_zero_rows_give_an_empty_result(wfmt, act):
    layer = _layer(wfmt, act=act, seed=4)
    ref = torch.nn.Linear(K, N).to(torch.bfloat16)
    for shape in ((0, K), (2, 0, K), (0, 3, K)):
        x = torch.empty(*shape, dtype=torch.bfloat16)
        y = layer(x)
        assert y.shape == ref(x).shape and y.dtype == torch.bfloat16, shape


def test_zero_rows_through_the_ops():
    q = R.quantize_weight(_randn(N, K, seed=13).float() * 0.05, "u4g128-sbf16")
    p = ha.pack_weight(q)
    out = ha.gemm(torch.empty(0, K, dtype=torch.bfloat16), p, "a-bf16_w-u4g128-sbf16_c-f32")
    assert out.shape == (0, N) and out.dtype == torch.float32
    codes, scales = ha.quantize_act(torch.empty(0, K), "e4m3-pt")
    assert codes.shape == (0, K) and scales.shape == (0, 1)


def test_compiled_layer_takes_strided_views_and_zero_rows():
    """Under torch.compile the views reach auto_gemm, which makes them readable at run time."""
    torch._dynamo.reset()
    layer = _layer(seed=5)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    for name, x, _ in _views():
        assert torch.equal(compiled(x), layer(x.contiguous())), name
    assert compiled(torch.empty(0, K, dtype=torch.bfloat16)).shape == (0, N)
    # A quantized-activation layer: the traced forward copies the view before quantize_act.
    fp8 = _layer("e4m3gc-sf32", act="e4m3-pt", seed=6)
    x = _randn(K, 6, seed=14).T
    assert torch.equal(torch.compile(fp8, fullgraph=True, backend="aot_eager")(x), fp8(x.contiguous()))
    torch._dynamo.reset()
