"""GPU tests of using a layer as nn.Linear is used: the slow-path warning (and HUMMING_STRICT) on a
real device, strided / transposed / unaligned activations reaching fast kernels, M = 0.
tests/test_slow_path.py and tests/test_inputs.py are the CPU versions.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import humming_aot as ha
from humming_aot import dispatch, registry

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine"),
]

K, N = 1024, 384


@pytest.fixture(autouse=True)
def clean_dispatch(monkeypatch):
    monkeypatch.delenv("HUMMING_STRICT", raising=False)
    dispatch.reset()
    yield
    dispatch.reset()


def _layer(wfmt, seed=0, **kw):
    torch.manual_seed(seed)
    return ha.QuantLinear.from_linear(torch.nn.Linear(K, N), wfmt, device="cuda", **kw)


def _x(m, seed, k=K):
    return torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to("cuda", torch.bfloat16)


# ---- no silent slow path ------------------------------------------------------------------------


# Formats that may have no fast kernel for the device (W8A8 FP8 is the example); the test
# takes the first one this build runs on the generic backend here.
SLOW_CANDIDATES = [("e4m3gc-sf32", "e4m3-pt"), ("e2m1g32-se8m0", None), ("u4g64-sbf16-zi", None)]


def _slow_layer(seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dispatch.SlowPathWarning)
        for wfmt, act in SLOW_CANDIDATES:
            layer = _layer(wfmt, seed, act_format=act)
            if registry.find(layer.instance_for(5)).backend == "generic":
                return layer
    pytest.skip("every candidate format has a fast kernel on this GPU")


def test_generic_layer_warns_once_and_strict_raises(monkeypatch):
    layer = _slow_layer()
    dispatch.reset()  # forget the warning instance_for above gave
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for m in (1, 5, 40, 300, 5):
            layer(_x(m, m))
    slow = [w for w in seen if w.category is dispatch.SlowPathWarning]
    assert len(slow) == 1, [str(w.message) for w in seen]
    name = torch.cuda.get_device_name()
    assert str(layer.fmt) in str(slow[0].message) and name in str(slow[0].message)
    assert "slow path:" in ha.explain(layer.fmt, N, K, 5, layout=layer.layout)
    monkeypatch.setenv("HUMMING_STRICT", "1")
    dispatch.reset()
    with pytest.raises(dispatch.SlowPathError, match=re.escape(name)):
        layer(_x(5, 1))


def test_fast_layer_does_not_warn():
    layer = _layer("u4g128-sbf16")
    if registry.find(layer.instance_for(16)).backend == "generic":
        pytest.skip("this build has no fast u4g128-sbf16 kernel for this GPU")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for m in (1, 16, 300):
            layer(_x(m, m))
    assert not [w for w in seen if w.category is dispatch.SlowPathWarning]


# ---- inputs as nn.Linear takes them -------------------------------------------------------------


def _views(m=9):
    wide = _x(m, 2, k=K + 24)
    buf = torch.randn(m * K + 8, generator=torch.Generator().manual_seed(3)).to("cuda", torch.bfloat16)
    return [
        ("transposed", _x(K, 4)[:, :m].T),
        ("every other column", _x(m, 5, k=2 * K)[:, ::2]),
        ("rows of a wider tensor", wide[:, 8 : 8 + K]),  # row stride K + 24: a multiple of 8, read in place
        ("odd row stride", _x(m, 6, k=K + 3)[:, :K]),  # fast kernels need a copy
        ("expanded row", _x(1, 7).expand(m, K)),
        ("unaligned start", buf[1 : 1 + m * K].view(m, K)),  # fast kernels need a copy
    ]


@pytest.mark.parametrize("wfmt", ["u4g128-sbf16", "u4g64-sbf16-zi"])
def test_strided_and_unaligned_views_match_contiguous(wfmt):
    layer = _layer(wfmt, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dispatch.SlowPathWarning)
        for m in (1, 9, 70):
            for name, x in _views(m):
                assert torch.equal(layer(x), layer(x.contiguous())), f"{wfmt} m={m} {name}"


def test_zero_rows_on_gpu():
    layer = _layer("u4g128-sbf16", seed=3)
    assert layer(torch.empty(0, K, device="cuda", dtype=torch.bfloat16)).shape == (0, N)
    assert layer(torch.empty(2, 0, K, device="cuda", dtype=torch.bfloat16)).shape == (2, 0, N)
    out = ha.gemm(torch.empty(0, K, device="cuda", dtype=torch.bfloat16), layer.packed, layer.fmt)
    assert out.shape == (0, N) and out.is_cuda


# ---- any shape runs -----------------------------------------------------------------------------


@pytest.mark.parametrize("wfmt", ["u4gc-sbf16", "u8gc-sbf16"])
@pytest.mark.parametrize("n,k", [(40, 77), (37, 1000), (300, 100)])
def test_any_shape_runs(wfmt, n, k):
    """A layer whose shape no fast kernel takes (77 inputs: rows of 154 bytes; 37 channels) packs
    for a layout some instance runs (the generic one where the fast kernels refuse the shape) and
    matches the reference; no DispatchError for a shape the generic backend computes."""
    from humming_aot import reference as R
    from humming_aot.testing import assert_gemm_close

    torch.manual_seed(n + k)
    lin = torch.nn.Linear(k, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dispatch.SlowPathWarning)
        layer = ha.QuantLinear.from_linear(lin, wfmt, device="cuda")
        q = R.quantize_weight(lin.weight.detach(), wfmt)
        w = R.dequantize_weight(q)
        for m in (1, 33):
            x = _x(m, m, k=k)
            y = layer(x)
            ref = x.cpu().double() @ w.double().T + lin.bias.detach().to(torch.bfloat16).double()
            assert_gemm_close(y, ref, x.cpu().float(), w, f"{wfmt} {n}x{k} m={m} ({layer.instance_for(m)})")
    if k % 8:
        assert layer.layout == 1, "no fast kernel takes rows of an odd number of 16-bit inputs"


# ---- first calls --------------------------------------------------------------------------------


def test_layer_built_on_the_gpu_has_its_kernels_loaded(monkeypatch):
    """A layer built on the GPU has loaded the kernels of the instance of every M range (the
    loader succeeded for each); with HUMMING_PRELOAD=0 it leaves them to the calls. (The time a
    first call saves is measured by scripts/first_call.py, not asserted here.)"""
    monkeypatch.setattr(dispatch, "_prepared", set())
    layer = _layer("u4g128-sbf16", seed=4)
    idx = torch.cuda.current_device()
    used = {layer.instance_for(m) for m in (1, 8, 9, 16, 17, 32, 64, 65, 256, 257, 1024, 1025, 8192)}
    assert used <= {name for name, dev in dispatch._prepared if dev == idx}
    monkeypatch.setattr(dispatch, "_prepared", set())
    monkeypatch.setenv("HUMMING_PRELOAD", "0")
    _layer("u4g128-sbf16", seed=5)
    assert not dispatch._prepared
    # Moved to the GPU after it was built: loads then.
    monkeypatch.delenv("HUMMING_PRELOAD")
    cpu_layer = ha.QuantLinear.from_linear(torch.nn.Linear(K, N), "u4g128-sbf16", layout=layer.layout)
    assert not dispatch._prepared
    cpu_layer.to("cuda")
    assert used <= {name for name, dev in dispatch._prepared if dev == idx}
