"""torch.compile on the CPU reference path: QuantLinear and every torch.ops.humming op compile with
fullgraph=True, with static and dynamic M, and give the eager result bit for bit (the compiled graph
calls the same op implementation on the same inputs: nothing is reordered or fused into the GEMM),
plus torch.library.opcheck on every op the package registers.

The instance choice, host-side Python that Dynamo cannot trace, happens inside
torch.ops.humming.auto_gemm at run time; on the CPU that op runs the reference kernel, so these
tests trace the same graph a GPU gets (tests/test_gpu_compile.py runs it there).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import humming_aot as ha
from humming_aot import reference as R
from humming_aot.layers import QuantLinear

# (weight format, activation format): unsigned codes with the implied zero point, per-channel 8-bit
# codes with integer zero points, f16 with float zero points, and FP8 activations (quantize_act in
# the graph too).
LAYER_FORMATS = [
    ("u4g128-sbf16", "bf16"),
    ("u8gc-sbf16-zi", "bf16"),
    ("u4g64-sf16-zf", "f16"),
    ("e4m3gc-sf32", "e4m3-pt"),
]
K, N = 256, 72
# 1 and odd M values, a multiple of 8 and one past a tile height.
STATIC_MS = (1, 7, 16)
DYNAMIC_MS = (5, 16, 33, 7, 1)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # each test counts its own compilations
    yield
    torch._dynamo.reset()


def _layer(wfmt, act, *, bias=True, seed=0, k=K, n=N):
    torch.manual_seed(seed)
    dtype = torch.float16 if act == "f16" else torch.float32
    return QuantLinear.from_linear(torch.nn.Linear(k, n, bias=bias, dtype=dtype), wfmt, act_format=act)


def _x(shape, act, seed):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x.to(torch.float16 if act == "f16" else torch.bfloat16)


def _assert_same(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    assert torch.equal(got, want), f"{what}: compiled result differs from eager"


# ---- QuantLinear ---------------------------------------------------------------------------------


@pytest.mark.parametrize("wfmt,act", LAYER_FORMATS)
def test_quant_linear_fullgraph_static_m(wfmt, act):
    layer = _layer(wfmt, act)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(layer, fullgraph=True, dynamic=False, backend=counter)
    for i, m in enumerate(STATIC_MS):
        x = _x((m, K), act, seed=i)
        _assert_same(compiled(x), layer(x), f"{wfmt} m={m}")
    assert counter.frame_count == len(STATIC_MS)  # static shapes: one graph per M


@pytest.mark.parametrize("wfmt,act", LAYER_FORMATS)
def test_quant_linear_fullgraph_dynamic_m(wfmt, act):
    layer = _layer(wfmt, act)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=counter)
    for i, m in enumerate(DYNAMIC_MS):
        x = _x((m, K), act, seed=10 + i)
        _assert_same(compiled(x), layer(x), f"{wfmt} m={m}")
    # One graph for every M > 1; M = 1 is specialized by Dynamo itself (sizes 0 and 1 always are).
    assert counter.frame_count == 2, counter.frame_count


@pytest.mark.parametrize("wfmt,act", LAYER_FORMATS[:2])
def test_quant_linear_mark_dynamic_batch_dim(wfmt, act):
    """A 3-D input [batch, tokens, k] with the batch dimension marked dynamic: one graph for every
    batch size, the leading dimensions kept."""
    layer = _layer(wfmt, act)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(layer, fullgraph=True, backend=counter)
    for i, b in enumerate((3, 4, 9)):
        x = _x((b, 5, K), act, seed=20 + i)
        torch._dynamo.mark_dynamic(x, 0)
        y = compiled(x)
        assert y.shape == (b, 5, N)
        _assert_same(y, layer(x), f"{wfmt} batch={b}")
    assert counter.frame_count == 1


def test_model_of_several_layers_is_one_graph():
    """Two quantized layers with float ops between them trace into one graph (fullgraph=True)
    whose GEMMs are auto_gemm calls: no host-side choice is left in the traced code."""
    model = torch.nn.Sequential(
        _layer("u4g128-sbf16", "bf16", seed=1, n=128),
        torch.nn.GELU(),
        _layer("u8gc-sbf16-zi", "bf16", seed=2, k=128, n=N),
    )
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=capture)
    for i, m in enumerate((3, 11)):
        x = _x((m, K), "bf16", seed=30 + i)
        _assert_same(compiled(x), model(x), f"m={m}")
    assert len(graphs) == 1
    # Dynamo records the op packet (humming.auto_gemm) or an overload of it (humming.auto_gemm.default).
    targets = [
        str(node.target).removesuffix(".default") for node in graphs[0].graph.nodes if node.op == "call_function"
    ]
    assert targets.count("humming.auto_gemm") == 2, targets
    assert "humming.gemm" not in targets


def test_named_instance_is_passed_through():
    """A layer built with an instance name passes it to auto_gemm, which gives it to the op (on the
    CPU the reference computes; the name is still checked)."""
    layer = _layer("u4g128-sbf16", "bf16")
    layer.instance = "no-such-instance"
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="no compiled instance is named 'no-such-instance'"):
        compiled(_x((3, K), "bf16", seed=0))


def test_fake_kernels_come_with_the_ops():
    """A process that imports only humming_aot.layers (not humming_aot.ops, where the fake kernels
    are written) compiles a layer: loading the compiled ops registers their fake kernels."""
    code = (
        "import torch\n"
        "from humming_aot.layers import QuantLinear\n"
        "layer = QuantLinear.from_linear(torch.nn.Linear(128, 32), 'u4g128-sbf16')\n"
        "x = torch.randn(3, 128).to(torch.bfloat16)\n"
        "y = torch.compile(layer, fullgraph=True, backend='aot_eager')(x)\n"
        "assert torch.equal(y, layer(x))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


# ---- every op ------------------------------------------------------------------------------------


def _packed(wfmt="u4g64-sbf16-zi", n=40, k=200, seed=3):
    q = R.quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05, wfmt)
    return q, ha.pack_weight(q)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("op_name", ["gemm", "auto_gemm"])
def test_gemm_ops_compile(op_name, dynamic):
    q, p = _packed()
    bias = torch.randn(40).to(torch.bfloat16)
    op = getattr(torch.ops.humming, op_name)
    fmt = "a-bf16_w-u4g64-sbf16-zi_c-bf16"

    def f(x):
        return op(x, p.codes, p.scales, p.zeros, None, None, bias, fmt, p.layout, p.n, p.k, "")

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for m in (1, 6, 13):
        x = _x((m, 200), "bf16", seed=m)
        _assert_same(compiled(x), f(x), f"{op_name} m={m}")


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_gemm_wrapper_compiles(dynamic):
    """humming_aot.gemm (format parsing, the packed-weight check) traces too, with the packed
    weight's integers symbolic under dynamic=True."""
    _, p = _packed()

    def f(x):
        return ha.gemm(x, p, "a-bf16_w-u4g64-sbf16-zi_c-bf16")

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for m in (1, 9, 4):
        x = _x((m, 200), "bf16", seed=m)
        _assert_same(compiled(x), f(x), f"m={m}")


def test_quantized_gemm_chain_compiles():
    """quantize_act feeding gemm with activation scales, per-group e4m3 and an NVFP4 weight with a
    global scale: every optional tensor of the schema present."""
    q, p = _packed("e2m1g16-se4m3-gs", n=48, k=256)
    fmt = "a-e4m3-g64_w-e2m1g16-se4m3-gs_c-f32"

    def f(x):
        a, s = ha.quantize_act(x, "e4m3-g64")
        return ha.gemm(a, p, fmt, a_scales=s)

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for m in (1, 5, 12):
        x = torch.randn(m, 256, generator=torch.Generator().manual_seed(m))
        _assert_same(compiled(x), f(x), f"m={m}")


def test_pack_and_unpack_compile():
    q, _ = _packed()

    def f(codes, scales, zeros):
        pc, ps, pz = torch.ops.humming.pack_weight(codes, scales, zeros, "u4g64-sbf16-zi", 1)
        return torch.ops.humming.unpack_weight(pc, ps, pz, "u4g64-sbf16-zi", 1, 40, 200)

    for dynamic in (False, True):
        torch._dynamo.reset()
        codes, scales, zeros = torch.compile(f, fullgraph=True, dynamic=dynamic)(q.codes, q.scales, q.zeros)
        assert torch.equal(codes, q.codes) and torch.equal(scales, q.scales) and torch.equal(zeros, q.zeros)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("act", ["e4m3-pt", "i8-g32"])
def test_quantize_act_compiles(act, dynamic):
    def f(x):
        return torch.ops.humming.quantize_act(x, act)

    compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
    for m in (1, 7, 20):
        x = torch.randn(m, 96, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
        for got, want in zip(compiled(x), f(x)):
            assert torch.equal(
                got.view(torch.uint8) if got.element_size() == 1 else got,
                want.view(torch.uint8) if want.element_size() == 1 else want,
            )


# ---- opcheck -------------------------------------------------------------------------------------


def _gemm_cases():
    """gemm argument tuples covering every optional tensor (absent and present)."""
    cases = []
    q, p = _packed("u4g64-sbf16-zi", n=16, k=128)
    x = _x((3, 128), "bf16", seed=1)
    cases.append((x, p.codes, p.scales, p.zeros, None, None, None, "a-bf16_w-u4g64-sbf16-zi_c-bf16", 1, 16, 128, ""))
    cases.append(
        (
            x,
            p.codes,
            p.scales,
            p.zeros,
            None,
            None,
            torch.randn(16).to(torch.bfloat16),
            "a-bf16_w-u4g64-sbf16-zi_c-bf16",
            1,
            16,
            128,
            "",
        )
    )
    # A global scale and activation scales (int8 codes and e8m0 scales: see test_opcheck_fp8_operands).
    _, p4 = _packed("e2m1g32-se8m0-gs", n=24, k=64)
    a, s = ha.quantize_act(torch.randn(5, 64), "i8-pt")
    cases.append(
        (a, p4.codes, p4.scales, None, p4.global_scale, s, None, "a-i8-pt_w-e2m1g32-se8m0-gs_c-f32", 1, 24, 64, "")
    )
    _, p8 = _packed("u8gc-sbf16-zi", n=8, k=96)
    cases.append(
        (
            _x((1, 96), "bf16", seed=2),
            p8.codes,
            p8.scales,
            p8.zeros,
            None,
            None,
            None,
            "a-bf16_w-u8gc-sbf16-zi_c-bf16",
            1,
            8,
            96,
            "",
        )
    )
    return cases


def _opcheck_cases():
    """Example inputs for each op the package registers, by op name."""
    q, p = _packed("u4g64-sbf16-zi", n=16, k=128)
    qf, pf = _packed("e4m3g128n128-sf32", n=20, k=256)
    gemm = _gemm_cases()
    # The activation's cases, and the same with its quantization (moe_activation_quantize).
    activation = [
        (torch.randn(5, 12).to(torch.bfloat16), None, None, "silu", 7.0, 1.702, "bf16"),
        (
            torch.randn(5, 12),
            torch.randn(3, 12),
            torch.tensor([0, 2, 2, 4], dtype=torch.int32),
            "swiglu-oai",
            7.0,
            1.702,
            "f16",
        ),
    ]
    return {
        "gemm": gemm,
        "auto_gemm": gemm,
        "pack_weight": [
            (q.codes, q.scales, q.zeros, "u4g64-sbf16-zi", 1),
            (qf.codes, qf.scales, None, "e4m3g128n128-sf32", 1),
        ],
        "unpack_weight": [
            (p.codes, p.scales, p.zeros, "u4g64-sbf16-zi", 1, 16, 128),
            (pf.codes, pf.scales, torch.empty(0, dtype=torch.uint8), "e4m3g128n128-sf32", 1, 20, 256),
        ],
        "quantize_act": [(torch.randn(4, 64), "e4m3-g32"), (torch.randn(1, 40).to(torch.bfloat16), "i8-pt")],
        "moe_gemm": _moe_gemm_cases(),
        "moe_gemm_masked": _moe_gemm_masked_cases(),
        "moe_topk": [
            (torch.randn(5, 8), 2, "softmax", True, None),
            (torch.randn(3, 16).to(torch.bfloat16), 4, "sigmoid", False, torch.randn(16)),
        ],
        "moe_align": [(torch.randint(0, 6, (10,), dtype=torch.int32), 6, 4), (torch.zeros(0, dtype=torch.int32), 3, 1)],
        "moe_permute": [(torch.randn(3, 8), torch.tensor([1, 5, 6, 0, 2, 6], dtype=torch.int32), 2)],
        "moe_permute_quantize": [
            (torch.randn(3, 64), torch.tensor([1, 5, 6, 0, 2, 6], dtype=torch.int32), 2, "e4m3-g32"),
            (torch.randn(2, 40).to(torch.bfloat16), torch.tensor([3, 0, 1, 2], dtype=torch.int32), 2, "i8-pt"),
        ],
        "moe_combine": [
            (
                torch.randn(6, 8).to(torch.bfloat16),
                torch.tensor([3, 0, 5, 1, 2, 4], dtype=torch.int32),
                torch.rand(3, 2),
            )
        ],
        "moe_activation": activation,
        "moe_activation_quantize": [c[:-1] + (f,) for c, f in zip(activation, ("e4m3-pt", "i8-g8"))],
    }


def _moe_gemm_cases():
    """Grouped GEMMs of three experts (one of them empty), with and without zero points."""
    from humming_aot import moe

    cases = []
    for wfmt in ("u4g64-sbf16-zi", "u4g128-sbf16"):
        st = moe.stack_experts([_packed(wfmt, n=16, k=128)[1] for _ in range(3)])
        off = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
        x = _x((5, 128), "bf16", seed=3)
        cases.append((x, st.codes, st.scales, st.zeros, off, f"a-bf16_w-{wfmt}_c-bf16", 1, 16, 128, 2, ""))
    # With the gated activation (output [rows, n / 2]), and with its per-expert bias.
    bias = torch.randn(3, 16, generator=torch.Generator().manual_seed(4))
    for act, b in (("silu", None), ("swiglu-oai", bias)):
        cases.append((x, st.codes, st.scales, st.zeros, off, "a-bf16_w-u4g128-sbf16_c-bf16", 1, 16, 128, 2, "", 5, act,
                      7.0, 1.702, b))  # fmt: skip
    return cases


def _moe_gemm_masked_cases():
    """Masked grouped GEMMs of three experts with slots of 4 rows (one expert empty, one full)."""
    from humming_aot import moe

    st = moe.stack_experts([_packed("u4g128-sbf16", n=16, k=128)[1] for _ in range(3)])
    counts = torch.tensor([2, 0, 4], dtype=torch.int32)
    x = _x((12, 128), "bf16", seed=4).view(3, 4, 128)
    return [(x, st.codes, st.scales, st.zeros, counts, "a-bf16_w-u4g128-sbf16_c-bf16", 1, 16, 128, 4, "")]


def _registered_ops():
    return sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("humming::"))


def test_every_registered_op_has_an_opcheck_case():
    assert _registered_ops() == sorted(_opcheck_cases()), "a new op needs example inputs in _opcheck_cases"


@pytest.mark.parametrize("op_name", sorted(_opcheck_cases()))
def test_opcheck(op_name):
    op = getattr(torch.ops.humming, op_name)
    for args in _opcheck_cases()[op_name]:
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("op_name", ["gemm", "auto_gemm"])
def test_opcheck_fp8_operands(op_name):
    """FP8 tensors as inputs (e4m3 activation codes; NVFP4's e4m3 scales): opcheck's schema test
    compares the inputs before and after the call with arithmetic torch's CPU does not implement
    for float8 (not a problem of the op), so these run the fake-tensor, autograd-registration and
    AOT-dispatch tests."""
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    op = getattr(torch.ops.humming, op_name)
    _, p = _packed("e4m3gc-sf32", n=24, k=64)
    a, s = ha.quantize_act(torch.randn(5, 64), "e4m3-pt")
    torch.library.opcheck(
        op,
        (
            a,
            p.codes,
            p.scales,
            None,
            None,
            s,
            torch.randn(24).to(torch.bfloat16),
            "a-e4m3-pt_w-e4m3gc-sf32_c-bf16",
            1,
            24,
            64,
            "",
        ),
        test_utils=utils,
    )
    _, p4 = _packed("e2m1g16-se4m3-gs", n=24, k=64)
    torch.library.opcheck(
        op,
        (
            _x((3, 64), "bf16", seed=4),
            p4.codes,
            p4.scales,
            None,
            p4.global_scale,
            None,
            None,
            "a-bf16_w-e2m1g16-se4m3-gs_c-bf16",
            1,
            24,
            64,
            "",
        ),
        test_utils=utils,
    )
