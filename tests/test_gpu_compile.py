"""GPU tests of torch.compile: QuantLinear on CUDA compiles with fullgraph=True, with static and
dynamic M, and gives the eager result bit for bit (the compiled graph calls auto_gemm, which makes
the eager path's instance choice at run time, and the kernels are deterministic); CUDA graphs
(mode="reduce-overhead"); dispatcher overrides reach compiled code; opcheck on CUDA tensors.
tests/test_compile.py is the CPU version.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import humming_aot as ha
from humming_aot import reference as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine"),
]

# u4g128-sbf16 has fast kernels on sm_80 and sm_90 (packed for them by layout="auto"); u4g64-sbf16-zi
# runs on the generic backend (its slow-path warning is expected and silenced here).
FORMATS = ["u4g128-sbf16", "u4g64-sbf16-zi"]
K, N = 1024, 384
# Both sides of the dispatch tables' M ranges (16, 64) and of the narrow kernels (8); 1 and odd values.
MS = (1, 5, 8, 9, 16, 17, 64, 65, 130)
# Static shapes compile a graph per M: fewer of them, under Dynamo's recompile limit (8).
STATIC_MS = (1, 8, 9, 17, 65)


@pytest.fixture(autouse=True)
def fresh_state():
    from humming_aot import dispatch

    torch._dynamo.reset()
    dispatch.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dispatch.SlowPathWarning)
        yield
    dispatch.reset()
    torch._dynamo.reset()


def _layer(wfmt, seed=0):
    torch.manual_seed(seed)
    return ha.QuantLinear.from_linear(torch.nn.Linear(K, N), wfmt, device="cuda")


def _x(m, seed):
    return torch.randn(m, K, generator=torch.Generator().manual_seed(seed)).to("cuda", torch.bfloat16)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("wfmt", FORMATS)
def test_quant_linear_compiles_on_gpu(wfmt, dynamic):
    layer = _layer(wfmt)
    compiled = torch.compile(layer, fullgraph=True, dynamic=dynamic)
    for m in MS if dynamic else STATIC_MS:
        x = _x(m, m)
        got, want = compiled(x), layer(x)
        torch.cuda.synchronize()
        assert torch.equal(got, want), f"{wfmt} m={m} ({layer.instance_for(m)})"


@pytest.mark.parametrize("wfmt", FORMATS)
def test_mark_dynamic_batch_dim_on_gpu(wfmt):
    layer = _layer(wfmt, seed=1)
    compiled = torch.compile(layer, fullgraph=True)
    for b in (2, 3, 17):
        x = torch.randn(b, 4, K, generator=torch.Generator().manual_seed(b)).to("cuda", torch.bfloat16)
        torch._dynamo.mark_dynamic(x, 0)
        assert torch.equal(compiled(x), layer(x)), f"{wfmt} batch={b}"


def test_reduce_overhead_cuda_graphs():
    """mode="reduce-overhead" records the compiled graph as a CUDA graph: the choice is made while
    recording, and replays give the eager bits."""
    layer = _layer("u4g128-sbf16", seed=2)
    compiled = torch.compile(layer, fullgraph=True, mode="reduce-overhead")
    for m in (8, 8, 8, 33, 33, 33):
        x = _x(m, 40 + m)
        got = compiled(x).clone()  # the graph's output buffer is reused by the next replay
        assert torch.equal(got, layer(x)), f"m={m}"


def test_forced_instance_reaches_compiled_code():
    """dispatch.force after compilation changes what the compiled layer runs, with no recompile:
    the choice is made inside auto_gemm on every call. Forcing the generic instance on a weight
    packed for a fast layout is refused, from inside the compiled graph; unforced, it runs again."""
    from humming_aot import dispatch, registry

    layer = _layer("u4g128-sbf16", seed=3)
    if layer.layout == 1:
        pytest.skip("this build has no fast layout for u4g128-sbf16 on this GPU")
    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    x = _x(9, 3)
    want = layer(x)
    assert torch.equal(compiled(x), want)
    generic = next(i.name for i in registry.instances() if i.backend == "generic")
    dispatch.force(generic)
    with pytest.raises(Exception, match=f"forced instance {generic} cannot run"):
        compiled(x)
    dispatch.force(None)
    assert torch.equal(compiled(x), want)


def test_opcheck_on_cuda():
    q = R.quantize_weight(torch.randn(64, 256) * 0.05, "u4g128-sbf16")
    p = ha.pack_weight(q, layout="generic").to("cuda")
    x = _x(5, 7)[:, :256].contiguous()
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    args = (x, p.codes, p.scales, None, None, None, None, fmt, 1, 64, 256, "")
    torch.library.opcheck(torch.ops.humming.gemm, args)
    torch.library.opcheck(torch.ops.humming.auto_gemm, args)
    torch.library.opcheck(torch.ops.humming.pack_weight, (q.codes.cuda(), q.scales.cuda(), None, "u4g128-sbf16", 1))
    torch.library.opcheck(
        torch.ops.humming.unpack_weight,
        (p.codes, p.scales, torch.empty(0, dtype=torch.uint8, device="cuda"), "u4g128-sbf16", 1, 64, 256),
    )
    torch.library.opcheck(torch.ops.humming.quantize_act, (torch.randn(4, 256, device="cuda"), "i8-pt"))
