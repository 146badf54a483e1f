"""MoE routing helpers (humming_aot.moe) against readable references written with Python loops:
top-k selection with both scorings, renormalization and a correction bias; alignment into padded
per-expert blocks for uniform, Zipf-skewed, single-expert and empty-expert loads, token counts whose
assignments fill no whole block, and 8 to 256 experts; the permutation and the weighted combine.
CPU here; the GPU tests at the end run the same on a GPU, inside a CUDA graph."""

from __future__ import annotations

import math

import pytest
import torch

from humming_aot import moe


def _ref_topk(logits, k, scoring, renormalize, bias=None):
    t, e = logits.shape
    w = torch.zeros(t, k)
    ids = torch.zeros(t, k, dtype=torch.int32)
    for i in range(t):
        row = logits[i].double()
        scores = torch.softmax(row, 0) if scoring == "softmax" else torch.sigmoid(row)
        choice = [float(scores[j]) + (float(bias[j]) if bias is not None else 0.0) for j in range(e)]
        order = sorted(range(e), key=lambda j: (-choice[j], j))[:k]  # ties: the lower expert id
        vals = [float(scores[j]) for j in order]
        if renormalize:
            vals = [v / sum(vals) for v in vals]
        w[i] = torch.tensor(vals)
        ids[i] = torch.tensor(order, dtype=torch.int32)
    return w, ids


@pytest.mark.parametrize("scoring", moe.SCORINGS)
@pytest.mark.parametrize("renormalize", [True, False])
def test_topk_route_matches_the_reference(scoring, renormalize):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(37, 16, generator=g)
    logits[5, 3] = logits[5, 9] = 9.0  # a tie for the top: expert 3 wins
    bias = torch.randn(16, generator=g) * 0.1 if scoring == "sigmoid" else None
    w, ids = moe.topk_route(logits, 4, scoring=scoring, renormalize=renormalize, correction_bias=bias)
    rw, rids = _ref_topk(logits, 4, scoring, renormalize, bias)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert torch.equal(ids, rids)
    assert torch.allclose(w, rw, rtol=1e-6, atol=1e-7)
    assert ids[5, 0] == 3 and ids[5, 1] == 9
    if renormalize:
        assert torch.allclose(w.sum(1), torch.ones(37))


def _loads(kind, t, k, e, g):
    if kind == "uniform":
        return torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]).to(torch.int32)
    if kind == "zipf":  # expert j chosen with weight 1 / (j + 1), k distinct per token
        p = 1.0 / torch.arange(1, e + 1, dtype=torch.float64)
        return torch.stack([torch.multinomial(p, k, replacement=False, generator=g) for _ in range(t)]).to(torch.int32)
    if kind == "one":  # every assignment on expert e - 1 (k = 1)
        return torch.full((t, k), e - 1, dtype=torch.int32)
    if kind == "empty":  # only the even experts
        return (torch.stack([torch.randperm(e // 2, generator=g)[:k] for _ in range(t)]) * 2).to(torch.int32)
    raise AssertionError(kind)


CASES = [
    ("uniform", 50, 2, 8, 16),
    ("zipf", 33, 4, 128, 64),
    ("one", 21, 1, 256, 16),
    ("empty", 7, 3, 16, 128),
    ("uniform", 1, 8, 256, 8),
    ("zipf", 300, 8, 256, 128),
]


@pytest.mark.parametrize("kind,t,k,e,block_m", CASES, ids=[f"{c[0]}-T{c[1]}-k{c[2]}-E{c[3]}-b{c[4]}" for c in CASES])
def test_moe_align_layout(kind, t, k, e, block_m):
    g = torch.Generator().manual_seed(t * 7 + e)
    ids = _loads(kind, t, k, e, g)
    al = moe.moe_align(ids, e, block_m)
    a = t * k
    flat = ids.reshape(-1).tolist()
    # The reference layout: per expert, its assignments in order, padded to whole blocks.
    rows, blocks = [], []
    for x in range(e):
        mine = [i for i in range(a) if flat[i] == x]
        n = -(-len(mine) // block_m) * block_m
        rows += mine + [a] * (n - len(mine))
        blocks += [x] * (n // block_m)
    assert al.capacity >= len(rows) and al.capacity % block_m == 0
    assert al.capacity == -(-(a + e * (block_m - 1)) // block_m) * block_m  # fixed by the shapes alone
    assert int(al.num_padded) == len(rows)
    assert al.sorted_ids.dtype == torch.int32 and al.sorted_ids.tolist() == rows + [a] * (al.capacity - len(rows))
    assert al.block_expert.tolist() == blocks + [-1] * (al.capacity // block_m - len(blocks))
    assert al.counts.tolist() == [flat.count(x) for x in range(e)]
    for i in range(a):
        assert al.sorted_ids[al.positions[i]] == i
    assert al.offsets[-1] == al.num_padded[0]


def test_permute_and_combine_match_a_loop():
    g = torch.Generator().manual_seed(9)
    t, h, e, k = 19, 24, 8, 3
    x = torch.randn(t, h, generator=g).to(torch.bfloat16)
    w, ids = moe.topk_route(torch.randn(t, e, generator=g), k)
    al = moe.moe_align(ids, e, 4)
    xs = moe.permute(x, al)
    assert xs.shape == (al.capacity, h)
    for r in range(al.capacity):
        i = int(al.sorted_ids[r])
        want = x[i // k] if i < t * k else torch.zeros(h, dtype=x.dtype)
        assert torch.equal(xs[r], want)
    # "Experts": row r multiplied by (expert of its block + 1), then combined.
    scale = (al.block_expert.repeat_interleave(4).clamp_min(0) + 1).to(torch.float32)
    y = (xs.float() * scale.unsqueeze(1)).to(torch.bfloat16)
    out = moe.combine(y, al, w)
    for i in range(t):
        ref = sum(float(w[i, j]) * (int(ids[i, j]) + 1) * x[i].float() for j in range(k))
        # y was rounded to bf16 before the combine, as an expert's output is
        assert torch.allclose(out[i].float(), ref, rtol=2e-2, atol=2e-2)
    assert out.dtype == torch.bfloat16 and torch.equal(moe.combine(y, al, w), out)


def _sorted_rows(x, al):
    """The expert-sorted rows as a loop over the alignment writes them: token sorted_ids[r] // top_k,
    zeros in padding rows."""
    rows = torch.zeros(al.capacity, x.shape[1], dtype=x.dtype)
    for r in range(al.capacity):
        a = int(al.sorted_ids[r])
        if 0 <= a < al.num_assignments:
            rows[r] = x[a // al.top_k]
    return rows


@pytest.mark.parametrize("act", ["e4m3-pt", "e4m3-g128", "e5m2-g16", "i8-pt"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_permute_quantize_is_the_reference_quantization_of_the_sorted_rows(act, dtype):
    """moe.permute_quantize gives, bit for bit, the reference quantizer's codes and scales of the
    rows a loop over the alignment gathers (padding rows of blocks of 4: zero codes, scale 1), from
    activations with a row stride past their width."""
    from humming_aot import reference as R

    g = torch.Generator().manual_seed(11)
    t, h, e, k = 23, 256, 8, 3
    wide = (torch.randn(t, h + 40, generator=g) * 4).to(dtype)
    x = wide[:, :h]  # row stride h + 40
    x[5] = 0.0  # a token of zeros: scale 1 in each of its rows
    _, ids = moe.topk_route(torch.randn(t, e, generator=g), k)
    al = moe.moe_align(ids, e, 4)
    assert al.capacity > t * k  # padding rows
    codes, scales = moe.permute_quantize(x, al, act)
    rc, rs = R.quantize_activation(_sorted_rows(x, al), act)
    assert codes.shape == (al.capacity, h) and codes.dtype == rc.dtype
    assert torch.equal(scales, rs.float())
    assert torch.equal(codes.view(torch.uint8), rc.view(torch.uint8))
    pad = [r for r in range(al.capacity) if int(al.sorted_ids[r]) >= t * k]
    assert pad and bool((codes[pad].view(torch.uint8) == 0).all()) and bool((scales[pad] == 1).all())


def test_permute_quantize_refuses_what_it_cannot_quantize():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 64, generator=g).to(torch.bfloat16)
    _, ids = moe.topk_route(torch.randn(5, 4, generator=g), 2)
    al = moe.moe_align(ids, 4, 1)
    with pytest.raises(ValueError, match=r"tokens x top_k = 10 assignments, got shape \(4, 64\)"):
        moe.permute_quantize(x[:4], al, "e4m3-pt")
    with pytest.raises(TypeError, match="float32, float16 or bfloat16, got torch.int32"):
        moe.permute_quantize(x.to(torch.int32), al, "e4m3-pt")
    with pytest.raises(Exception, match="not quantized"):
        moe.permute_quantize(x, al, "bf16")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_combine_with_an_expert_output_bias_is_each_terms_bias_first(dtype):
    """combine with the down projection's bias [E, H] and the assignments' expert ids: each term is
    weight x (row + its expert's bias), added in fp32 in choice order and rounded once, exactly as
    written out here with one rounding per add and per product; a bias needs ids, of the
    assignments' shape and within the experts."""
    g = torch.Generator().manual_seed(12)
    t, h, e, k = 7, 40, 6, 3
    w, ids = moe.topk_route(torch.randn(t, e, generator=g), k)
    al = moe.moe_align(ids, e, 1)
    y = torch.randn(al.capacity, h, generator=g).to(dtype)
    bias = torch.randn(e, h, generator=g)
    out = moe.combine(y, al, w, bias=bias, ids=ids)
    want = torch.empty(t, h)
    for i in range(t):
        acc = None
        for j in range(k):
            term = w[i, j] * (y[int(al.positions[i * k + j])].float() + bias[int(ids[i, j])])
            acc = term if acc is None else acc + term
        want[i] = acc
    assert out.dtype == dtype and torch.equal(out, want.to(dtype))
    with pytest.raises(ValueError, match="give both or neither"):
        moe.combine(y, al, w, bias=bias)
    with pytest.raises(ValueError, match=r"expert ids must be \[7, 3\]"):
        moe.combine(y, al, w, bias=bias, ids=ids[:, :2])
    with pytest.raises(ValueError, match="expert id 4 is 6; the bias has 6 experts"):
        bad = ids.clone()
        bad[1, 1] = 6
        moe.combine(y, al, w, bias=bias, ids=bad)
    with pytest.raises(ValueError, match=r"the expert output bias must be \[experts, 40\]"):
        moe.combine(y, al, w, bias=bias[:, :8], ids=ids)


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="top_k"):
        moe.topk_route(torch.randn(3, 4), 5)
    with pytest.raises(ValueError, match="scoring"):
        moe.topk_route(torch.randn(3, 4), 2, scoring="relu")
    with pytest.raises(ValueError, match=r"2-D"):
        moe.topk_route(torch.randn(4), 2)
    with pytest.raises(TypeError, match="floating point"):
        moe.topk_route(torch.ones(3, 4, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match="correction_bias"):
        moe.topk_route(torch.randn(3, 4), 2, correction_bias=torch.zeros(3))
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        moe.moe_align(torch.tensor([[1, 8]], dtype=torch.int32), 8, 16)
    with pytest.raises(TypeError, match="int32 or int64"):
        moe.moe_align(torch.zeros(2, 2), 8, 16)
    with pytest.raises(ValueError, match="block_m"):
        moe.moe_align(torch.zeros(2, 2, dtype=torch.int32), 8, 0)
    al = moe.moe_align(torch.zeros(2, 2, dtype=torch.int32), 8, 16)
    with pytest.raises(ValueError, match="assignments"):
        moe.permute(torch.randn(3, 8), al)
    with pytest.raises(ValueError, match="routing weights"):
        moe.combine(torch.randn(al.capacity, 8), al, torch.ones(2, 3))


# ---- on a GPU, inside a CUDA graph ---------------------------------------------------------------


_ALIGN_FIELDS = ("sorted_ids", "block_expert", "num_padded", "positions", "counts", "offsets")


def _activation_formula(h, activation, bias, rows_expert, limit, alpha):
    """The experts' activation written out in torch, fp32: each row's expert's bias, then
    silu(gate) x up or gpt-oss's clamped SwiGLU."""
    h = h.float()
    if bias is not None:
        h = h + bias.float()[rows_expert]
    f = h.shape[1] // 2
    gate, up = h[:, :f], h[:, f:]
    if activation == "silu":
        return torch.nn.functional.silu(gate) * up
    gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return gate * torch.sigmoid(alpha * gate) * (up + 1)


@pytest.mark.parametrize("activation", ["silu", "swiglu-oai"])
@pytest.mark.parametrize("dtype,out", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32),
                                       (torch.float32, torch.bfloat16)])  # fmt: skip
def test_activate_is_the_formula_with_each_rows_experts_bias(activation, dtype, out):
    """moe.activate (torch.ops.humming.moe_activation) on the CPU: the torch formula in fp32 with
    each row's expert's bias (from the offsets, padding rows past the last expert counting as its;
    without offsets, expert 0's), rounded once to the output type, for h read with a row stride
    wider than its rows; without a bias the same formula alone."""
    g = torch.Generator().manual_seed(9)
    experts, f = 5, 24
    offsets = torch.tensor([0, 3, 3, 7, 8, 12], dtype=torch.int32)  # expert 1 empty, 2 rows of padding
    rows = 14
    wide = (torch.randn(rows, 2 * f + 6, generator=g) * 4).to(dtype)
    h = wide[:, : 2 * f]  # row stride 2F + 6
    bias = torch.randn(experts, 2 * f, generator=g)
    r = torch.arange(rows)
    rows_expert = (torch.searchsorted(offsets[1:], r.to(torch.int32), right=True)).clamp(max=experts - 1)
    for b, o, re in ((bias, offsets, rows_expert), (bias[2:3], None, torch.zeros(rows, dtype=torch.long)),
                     (None, None, None), (None, offsets, None)):  # fmt: skip
        got = moe.activate(h, activation, bias=b, offsets=o, limit=3.0, alpha=1.5, dtype=out)
        want = _activation_formula(h, activation, b, re, 3.0, 1.5)
        assert got.shape == (rows, f) and got.dtype == out
        # fp32 to a few units in the last place (the two exp), then one rounding to the output type
        torch.testing.assert_close(got.float(), want.to(out).float(), rtol=2.0**-7 if out != torch.float32 else 1e-6,
                                   atol=1e-6)  # fmt: skip
        close = (got.float() - want.to(out).float()).abs() <= 1e-6 * want.abs() + 1e-7
        assert close.float().mean() > 0.95, "nearly every output is the formula's, rounded once"


def test_activate_bad_input_is_named():
    h = torch.zeros(4, 10, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="activation must be one of silu, swiglu-oai"):
        moe.activate(h, "gelu")
    with pytest.raises(ValueError, match=r"2-D tensor \[rows, 2 x intermediate\]"):
        moe.activate(torch.zeros(4, 9, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="float32, float16 or bfloat16, got torch.int32"):
        moe.activate(torch.zeros(4, 10, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"the gate-up bias must be \[experts, 10\]"):
        moe.activate(h, bias=torch.zeros(2, 8))
    with pytest.raises(ValueError, match="a gate-up bias of 3 experts needs the rows' expert offsets"):
        moe.activate(h, bias=torch.zeros(3, 10))
    with pytest.raises(ValueError, match=r"expert offsets must be \[experts \+ 1\] \(the bias has 3\)"):
        moe.activate(h, bias=torch.zeros(3, 10), offsets=torch.tensor([0, 4], dtype=torch.int32))


@pytest.mark.parametrize("fmt", ["e4m3-pt", "i8-pt", "e5m2-g16"])
def test_activate_quantize_is_the_reference_quantization_of_the_activation(fmt):
    """moe.activate_quantize (torch.ops.humming.moe_activation_quantize) on the CPU: the reference
    quantizer's codes and scales (humming_aot.reference.quantize_activation) of moe.activate's output
    in h's dtype, biases found through the offsets."""
    from humming_aot import reference as R

    g = torch.Generator().manual_seed(12)
    experts, f, rows = 4, 48, 11
    h = (torch.randn(rows, 2 * f, generator=g) * 5).to(torch.bfloat16)
    bias = torch.randn(experts, 2 * f, generator=g)
    offsets = torch.tensor([0, 2, 2, 9, 10], dtype=torch.int32)
    for b, o in ((bias, offsets), (None, None)):
        codes, scales = moe.activate_quantize(h, fmt, "silu", bias=b, offsets=o)
        want_codes, want_scales = R.quantize_activation(moe.activate(h, "silu", bias=b, offsets=o).float(), fmt)
        assert codes.shape == (rows, f) and codes.dtype == want_codes.dtype
        assert torch.equal(codes.view(torch.uint8), want_codes.view(torch.uint8))
        assert torch.equal(scales, want_scales)


def test_activate_quantize_bad_input_is_named():
    h = torch.zeros(4, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not quantized; moe_activation_quantize takes e4m3, e5m2 or i8"):
        moe.activate_quantize(h, "bf16")
    with pytest.raises(ValueError, match="activation must be one of silu, swiglu-oai"):
        moe.activate_quantize(h, "e4m3-pt", "gelu")
    with pytest.raises(ValueError, match=r"2-D tensor \[rows, 2 x intermediate\]"):
        moe.activate_quantize(torch.zeros(4, 9, dtype=torch.bfloat16), "e4m3-pt")
    with pytest.raises(ValueError, match="a gate-up bias of 3 experts needs the rows' expert offsets"):
        moe.activate_quantize(h, "e4m3-pt", bias=torch.zeros(3, 16))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_routing_on_the_gpu_is_graph_capturable_and_matches_the_cpu():
    g = torch.Generator().manual_seed(5)
    t, h, e, k, bm = 64, 32, 128, 8, 16
    logits = torch.randn(t, e, generator=g)
    x = torch.randn(t, h, generator=g).to(torch.bfloat16)
    cpu_w, cpu_ids = moe.topk_route(logits, k)
    cpu_al = moe.moe_align(cpu_ids, e, bm)
    lg, xg = logits.cuda(), x.cuda()

    def route():
        w, ids = moe.topk_route(lg, k)
        al = moe.moe_align(ids, e, bm)
        return w, ids, al, moe.combine(moe.permute(xg, al), al, w)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        route()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        w, ids, al, out = route()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(ids.cpu(), cpu_ids) and torch.allclose(w.cpu(), cpu_w)
    assert torch.equal(al.sorted_ids.cpu(), cpu_al.sorted_ids) and torch.equal(
        al.block_expert.cpu(), cpu_al.block_expert
    )
    assert torch.equal(out.cpu(), moe.combine(moe.permute(x, cpu_al), cpu_al, cpu_w))


# (tokens, hidden, act): the kernels of quantize_act that permute_quantize reads through the
# alignment: a warp per row (more than 256 rows of at most 2048 inputs), a block per row (few rows;
# 4 and 8 vectors a thread: rows of 8192 and 40960 inputs, the latter sent to the long rows' kernel
# when gathered), the long rows' kernel (beyond 65536), the groups' kernel, and the scalar one (k
# not a multiple of 8).
PERMUTE_QUANT_CASES = [
    (120, 2048, "e4m3-pt"),
    (9, 768, "i8-pt"),
    (9, 8192, "e4m3-pt"),
    (3, 40960, "e5m2-pt"),
    (2, 70000, "e4m3-pt"),
    (40, 7168, "e4m3-g128"),
    (17, 100, "e4m3-pt"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("t,h,act", PERMUTE_QUANT_CASES, ids=[f"{t}x{h}-{a}" for t, h, a in PERMUTE_QUANT_CASES])
def test_permute_quantize_on_the_gpu_is_quantize_of_permute(t, h, act):
    """On the GPU, permute_quantize gives the CPU path's codes and scales bit for bit, and
    quantize_act of the GPU's permute bit for bit, with padding rows (blocks of 16) and without, for
    bf16 and fp32 tokens; and it runs inside a CUDA graph."""
    import humming_aot as ha

    g = torch.Generator().manual_seed(t * 31 + h)
    e, k = 8, 4
    _, ids = moe.topk_route(torch.randn(t, e, generator=g), k)
    x = torch.randn(t, h, generator=g) * torch.exp2(torch.randint(-10, 10, (t, 1), generator=g).float())
    x[t // 2] = 0.0
    for dtype in (torch.bfloat16, torch.float32):
        xs = x.to(dtype)
        for block_m in (1, 16):
            al = moe.moe_align(ids, e, block_m)
            al_g = moe.Alignment(*(getattr(al, f).cuda() for f in _ALIGN_FIELDS), al.block_m, al.num_assignments, k)
            c_cpu, s_cpu = moe.permute_quantize(xs, al, act)
            c_gpu, s_gpu = moe.permute_quantize(xs.cuda(), al_g, act)
            c_two, s_two = ha.quantize_act(moe.permute(xs.cuda(), al_g), act)
            for c, s, what in ((c_cpu, s_cpu, "cpu"), (c_two.cpu(), s_two.cpu(), "quantize_act(permute)")):
                assert torch.equal(s_gpu.cpu(), s), (dtype, block_m, what)
                assert torch.equal(c_gpu.cpu().view(torch.uint8), c.view(torch.uint8)), (dtype, block_m, what)
    xg = x.to(torch.bfloat16).cuda()
    graph = torch.cuda.CUDAGraph()
    moe.permute_quantize(xg, al_g, act)  # loads the module outside the capture
    with torch.cuda.graph(graph):
        c_graph, s_graph = moe.permute_quantize(xg, al_g, act)
    graph.replay()
    torch.cuda.synchronize()
    c_ref, s_ref = moe.permute_quantize(xg, al_g, act)
    assert torch.equal(c_graph.view(torch.uint8), c_ref.view(torch.uint8)) and torch.equal(s_graph, s_ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("t,h", [(3, 2880), (300, 2048)])  # the narrow and the wide combine kernels
def test_combine_with_a_bias_on_the_gpu_equals_the_cpu(t, h):
    """combine with an expert output bias on the GPU gives the CPU reference's bits."""
    g = torch.Generator().manual_seed(t)
    e, k = 16, 4
    w, ids = moe.topk_route(torch.randn(t, e, generator=g), k)
    al = moe.moe_align(ids, e, 1)
    y = torch.randn(al.capacity, h, generator=g).to(torch.bfloat16)
    bias = torch.randn(e, h, generator=g)
    cpu = moe.combine(y, al, w, bias=bias, ids=ids)
    dev = moe.Alignment(*(getattr(al, f).cuda() for f in _ALIGN_FIELDS), al.block_m, al.num_assignments, al.top_k)
    gpu = moe.combine(y.cuda(), dev, w.cuda(), bias=bias.cuda(), ids=ids.cuda())
    assert torch.equal(gpu.cpu(), cpu)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("activation", ["silu", "swiglu-oai"])
@pytest.mark.parametrize("f,shift", [(200, 0), (256, 0), (256, 1)])
def test_activate_on_the_gpu_matches_the_cpu_and_is_graph_capturable(activation, f, shift):
    """The CUDA kernel of moe.activate gives the CPU reference's outputs to fp32 rounding (at most
    one unit of the output type apart), with biases found through device offsets, inside a CUDA
    graph too; for F a multiple of 8 on 16-byte aligned rows (the kernel's wide accesses, where it
    has them) and not, or on rows that start one element past an alignment (shift)."""
    g = torch.Generator().manual_seed(10)
    experts, rows = 8, 37
    h = (torch.randn(rows, 2 * f, generator=g) * 3).to(torch.bfloat16)
    bias = torch.randn(experts, 2 * f, generator=g)
    offsets = torch.tensor([0, 5, 5, 9, 20, 21, 30, 33, 35], dtype=torch.int32)
    cpu = moe.activate(h, activation, bias=bias, offsets=offsets, limit=7.0, alpha=1.702)
    hd = torch.empty(rows * 2 * f + shift, dtype=torch.bfloat16, device="cuda")[shift:].view(rows, 2 * f)
    hd.copy_(h)
    bd, od = bias.cuda(), offsets.cuda()
    gpu = moe.activate(hd, activation, bias=bd, offsets=od, limit=7.0, alpha=1.702)
    torch.testing.assert_close(gpu.cpu().float(), cpu.float(), rtol=2.0**-7, atol=1e-6)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = moe.activate(hd, activation, bias=bd, offsets=od, limit=7.0, alpha=1.702)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, gpu)


def _experts(e, h, f, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(e, 2 * f, h, generator=g) * 0.05, torch.randn(e, h, f, generator=g) * 0.05


def _ref_moe(x, logits, w1, w2, fmt, top_k, scoring="softmax", renormalize=True):
    """The MoE MLP written token by token in float64 from the experts' weights as the reference
    quantizer makes them (``fmt``), dequantized: independent of packing and of the layer."""
    from humming_aot import reference as R

    deq = lambda w: R.dequantize_weight(R.quantize_weight(w, fmt)).double()  # noqa: E731
    d1, d2 = [deq(w) for w in w1], [deq(w) for w in w2]
    w, ids = _ref_topk(logits, top_k, scoring, renormalize)
    f = w2.shape[2]
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            hid = d1[e] @ x[t].double()
            act = torch.nn.functional.silu(hid[:f]) * hid[f:]
            out[t] += float(w[t, j]) * (d2[e] @ act)
    return out


# Three bf16 roundings on the way (the gate-up output, silu(gate) * up, the output), each at most
# 2^-8 relative, and a fourth for the down GEMM's inputs: a norm-wise bound of 4 x 2^-8.
_MOE_TOL = 4 * 2.0**-8


@pytest.mark.parametrize(
    "experts,top_k,h,f,tokens,load,fmt",
    [
        (8, 2, 256, 128, 7, "uniform", "u4g128-sbf16"),
        (8, 2, 2880, 64, 5, "one", "u4g32-sbf16-zi"),  # gpt-oss's hidden size, all on one expert
        (16, 4, 128, 96, 9, "skewed", "e4m3gc-sbf16"),  # most experts empty
        (128, 8, 128, 64, 4, "uniform", "u8gc-sbf16"),
    ],
)
def test_quant_moe_matches_the_token_by_token_reference(experts, top_k, h, f, tokens, load, fmt):
    import humming_aot as ha

    w1, w2 = _experts(experts, h, f, experts + h)
    layer = ha.QuantMoE.from_float(w1, w2, fmt, top_k)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(tokens, h, generator=g).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, generator=g)
    if load == "one":
        logits[:, 5] += 100.0  # every token's first choice
    elif load == "skewed":
        logits += torch.linspace(8.0, -8.0, experts)  # the low experts take nearly everything
    got = layer(x, logits)
    assert got.shape == (tokens, h) and got.dtype == torch.bfloat16
    ref = _ref_moe(x.float(), logits, w1, w2, fmt, top_k)
    err = (got.double() - ref).norm() / ref.norm()
    assert err <= _MOE_TOL, f"relative error {err:.2e}"


def test_quant_moe_gate_rows_come_first():
    """Swapping the gate and up halves changes the result far beyond rounding: the layer reads gate
    rows first, as documented."""
    import humming_aot as ha

    w1, w2 = _experts(4, 128, 64, 1)
    x = torch.randn(6, 128, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(4))
    layer = ha.QuantMoE.from_float(w1, w2, "u4g64-sbf16", 2)
    swapped = ha.QuantMoE.from_float(torch.cat([w1[:, 64:], w1[:, :64]], 1), w2, "u4g64-sbf16", 2)
    ref = _ref_moe(x.float(), logits, w1, w2, "u4g64-sbf16", 2)
    assert (layer(x, logits).double() - ref).norm() / ref.norm() <= _MOE_TOL
    assert (swapped(x, logits).double() - ref).norm() / ref.norm() > 0.1


def test_quant_moe_bad_input_is_named():
    import humming_aot as ha

    w1, w2 = _experts(4, 128, 64, 1)
    layer = ha.QuantMoE.from_float(w1, w2, "u4g64-sbf16", 2)
    x = torch.randn(3, 128).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"activations \[tokens, 128\]"):
        layer(x[:, :64], torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"router logits must be \[tokens, experts\] = \[3, 4\]"):
        layer(x, torch.randn(3, 5))
    with pytest.raises(ValueError, match="top_k must be an integer from 1 to the 4 experts"):
        ha.QuantMoE.from_float(w1, w2, "u4g64-sbf16", 5)
    with pytest.raises(ValueError, match=r"expert 1: gate-up must be \[2F, H\]"):
        ha.QuantMoE(list(layer.gate_up[i].packed for i in range(2)), [layer.down[0].packed, layer.gate_up[1].packed], 1)
    with pytest.raises(ValueError, match=r"float experts must be \[E, 2F, H\]"):
        ha.QuantMoE.from_float(w1[0], w2, "u4g64-sbf16", 2)
    with pytest.raises(ValueError, match=r"correction_bias must be a tensor \[experts\] = \[4\], got"):
        ha.QuantMoE.from_float(w1, w2, "u4g64-sbf16", 2, scoring="sigmoid", correction_bias=torch.zeros(5))
    # A bias is kept in fp32 beside the experts (on a GPU layer: no copy in each forward, which a
    # CUDA graph capture could not make).
    b = torch.randn(4, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    biased = ha.QuantMoE.from_float(w1, w2, "u4g64-sbf16", 2, scoring="sigmoid", correction_bias=b)
    assert biased.correction_bias.dtype == torch.float32 and torch.equal(biased.correction_bias, b.float())
    assert biased.correction_bias.device == biased.gate_up[0].codes.device


def test_quant_moe_names_the_grouped_instances_of_a_call():
    """QuantMoE.instances for a described H200 (no GPU): grouped instances of the layer's formats,
    the gate-up's for its [2F, H] weights and the down's for [H, F], the same as the C++ choice for
    that GEMM; a layer with no grouped path on a GPU, or a bad request, is refused with the reason."""
    import humming_aot as ha
    from humming_aot._ext import C

    w1, w2 = _experts(8, 256, 128, 3)
    layer = ha.QuantMoE.from_float(w1, w2, "u4g128-sbf16", 2, layout="sm90")
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    for tokens in (1, 64, 4096):
        got = layer.instances(tokens, cc=90, sms=132)
        assert set(got) == {"gate_up", "down"}
        for part, (n, k) in (("gate_up", (256, 256)), ("down", (256, 128))):
            assert got[part].startswith(f"sm90_wgmma_moe_{fmt}_"), got
            rows = max(1, tokens * 2 // 8)
            assert got[part] == C.select_grouped_instance(fmt, 3, n, k, rows, 8, tokens * 2, 90, 132)
    with pytest.raises(ValueError, match="at least 1"):
        layer.instances(0, cc=90, sms=132)
    with pytest.raises(ValueError, match="both cc and sms"):
        layer.instances(1, cc=90)
    generic = ha.QuantMoE.from_float(w1, w2, "u4g128-sbf16", 2)
    with pytest.raises(ValueError, match=r"no grouped instance of a-bf16_w-u4g128-sbf16_c-bf16 in layout 1"):
        generic.instances(1, cc=90, sms=132)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_quant_moe_on_the_per_expert_loop_warns_once_and_refuses_graph_capture():
    """Experts packed for the sm80 kernels run one dense GEMM pair per expert: they match the
    reference, say once that this is the per-expert loop, and a graph capture is refused by name."""
    import warnings

    import humming_aot as ha
    from humming_aot import dispatch, registry
    from humming_aot import formats as F
    from humming_aot import moe as M

    g = F.parse_gemm_format("a-bf16_w-u4g128-sbf16_c-bf16")
    if not any(i.scheduler != "moe" and i.layout == 2 and dispatch._computes(i, g) for i in registry.instances()):
        # (A build filtered with HUMMING_FILTER, e.g. to the grouped instances by scripts/gpu_ab.sh.)
        pytest.skip("this build has no dense instance that reads u4g128-sbf16 in the sm80 layout")
    w1, w2 = _experts(8, 256, 128, 11)
    layer = ha.QuantMoE.from_float(w1, w2, "u4g128-sbf16", 2, device="cuda", layout="sm80")
    x = torch.randn(33, 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    logits = torch.randn(33, 8, generator=torch.Generator().manual_seed(2))
    M._WARNED_LOOP = False
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = layer(x.cuda(), logits.cuda())
        layer(x.cuda(), logits.cuda())
    assert sum("dense GEMMs, one pair per expert" in str(w.message) for w in seen) == 1
    ref = _ref_moe(x.float(), logits, w1, w2, "u4g128-sbf16", 2)
    assert (got.cpu().double() - ref).norm() / ref.norm() <= _MOE_TOL
    xd, ld = x.cuda(), logits.cuda()  # (a copy from the host inside the capture fails before the layer runs)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph"):
        with torch.cuda.graph(graph):
            layer(xd, ld)


# ---- the grouped GEMM (moe_gemm) ------------------------------------------------------------------


def _stacked(e, n, k, fmt, layout, seed, device="cpu"):
    import humming_aot as ha
    from humming_aot import reference as R

    g = torch.Generator().manual_seed(seed)
    qs = [R.quantize_weight(torch.randn(n, k, generator=g) * 0.05, fmt) for _ in range(e)]
    packed = [ha.pack_weight(q, layout=layout).to(device) for q in qs]
    return qs, packed, moe.stack_experts(packed)


def _offsets(counts):
    return torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)


def _ref_grouped(x, qs, off):
    from humming_aot import reference as R

    return torch.cat([x[off[e] : off[e + 1]].double() @ R.dequantize_weight(q).double().T for e, q in enumerate(qs)])


@pytest.mark.parametrize("fmt", ["u4g128-sbf16", "u8gc-sbf16-zi", "e4m3gc-sbf16"])
def test_moe_gemm_on_the_cpu_is_each_experts_gemm(fmt):
    import humming_aot as ha

    qs, packed, st = _stacked(6, 80, 256, fmt, "generic", 5)
    counts = [3, 0, 9, 1, 0, 4]  # empty experts among them
    off = _offsets(counts)
    x = torch.randn(sum(counts), 256, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    gemm_fmt = f"a-bf16_w-{fmt}_c-bf16"
    y = moe.moe_gemm(x, st, off, gemm_fmt)
    assert y.shape == (17, 80) and y.dtype == torch.bfloat16
    for e in range(6):
        if counts[e]:
            assert torch.equal(y[off[e] : off[e + 1]], ha.gemm(x[off[e] : off[e + 1]], packed[e], gemm_fmt)), e
    ref = _ref_grouped(x, qs, off)
    assert (y.double() - ref).norm() / ref.norm() <= 2.0**-7
    assert moe.moe_gemm(x[:0], st, torch.zeros(7, dtype=torch.int32), gemm_fmt).shape == (0, 80)
    # the routed-row count only picks the GPU kernel's walk over the experts' tiles
    assert torch.equal(moe.moe_gemm(x, st, off, gemm_fmt, assignments=17), y)


def _ref_glu(x, qs, off, activation, bias, limit=7.0, alpha=1.702):
    """The gated activation of the grouped GEMM, written out in fp64 from the dequantized weights:
    gate rows first, each row's expert's bias, silu(g) x up or gpt-oss's clamped SwiGLU."""
    h = _ref_grouped(x, qs, off)
    f = h.shape[1] // 2
    if bias is not None:
        experts = torch.searchsorted(off[1:].long(), torch.arange(h.shape[0]), right=True)
        h = h + bias.double()[experts]
    g, u = h[:, :f], h[:, f:]
    if activation == "silu":
        return g * torch.sigmoid(g) * u
    g, u = g.clamp(max=limit), u.clamp(-limit, limit)
    return g * torch.sigmoid(alpha * g) * (u + 1)


@pytest.mark.parametrize("activation", ["silu", "swiglu-oai"])
def test_moe_gemm_with_an_activation_is_the_gemm_then_activate(activation):
    """moe_gemm's `activation` on the CPU: [rows, F], bit for bit the plain grouped GEMM followed by
    moe.activate with the rows' experts' biases, and close to the fp64 formula."""
    qs, packed, st = _stacked(5, 2 * 96, 256, "u4g128-sbf16", "generic", 8)
    counts = [4, 0, 7, 1, 3]
    off = _offsets(counts)
    x = torch.randn(sum(counts), 256, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    bias = torch.randn(5, 2 * 96, generator=torch.Generator().manual_seed(10)) * 0.1
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    for b in (None, bias):
        y = moe.moe_gemm(x, st, off, fmt, activation=activation, limit=3.0, alpha=1.5, activation_bias=b)
        assert y.shape == (15, 96) and y.dtype == torch.bfloat16
        h = moe.moe_gemm(x, st, off, fmt)
        expect = moe.activate(h, activation, bias=b, offsets=off if b is not None else None, limit=3.0, alpha=1.5)
        assert torch.equal(y, expect), b is None
        ref = _ref_glu(x, qs, off, activation, b, limit=3.0, alpha=1.5)
        assert (y.double() - ref).norm() / ref.norm() <= 2.0**-6, b is None
    assert moe.moe_gemm(x[:0], st, torch.zeros(6, dtype=torch.int32), fmt, activation="silu").shape == (0, 96)


def test_moe_gemm_activation_bad_input_is_named():
    qs, packed, st = _stacked(3, 64, 128, "u4g128-sbf16", "generic", 1)
    x = torch.randn(5, 128).to(torch.bfloat16)
    off = _offsets([2, 0, 3])
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    with pytest.raises(ValueError, match="activation must be one of silu, swiglu-oai or None"):
        moe.moe_gemm(x, st, off, fmt, activation="gelu")
    with pytest.raises(ValueError, match="activation_bias needs an activation"):
        moe.moe_gemm(x, st, off, fmt, activation_bias=torch.zeros(3, 64))
    with pytest.raises(ValueError, match=r"activation_bias must be a tensor \[experts, 2F\] = \[3, 64\]"):
        moe.moe_gemm(x, st, off, fmt, activation="silu", activation_bias=torch.zeros(3, 32))
    _, _, odd = _stacked(3, 65, 128, "u4g128-sbf16", "generic", 1)
    with pytest.raises(ValueError, match="even n, got n=65"):
        moe.moe_gemm(x, odd, off, fmt, activation="silu")
    with pytest.raises(Exception, match="activation must be silu or swiglu-oai"):
        torch.ops.humming.moe_gemm(
            x, st.codes, st.scales, st.zeros, off, fmt, st.first.layout, 64, 128, 1, "", -1, "relu", 0.0, 0.0, None
        )


def test_moe_gemm_bad_input_is_named():
    qs, packed, st = _stacked(3, 64, 128, "u4g128-sbf16", "generic", 1)
    x = torch.randn(5, 128).to(torch.bfloat16)
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    with pytest.raises(ValueError, match=r"expert row offsets must be a tensor \[4\]"):
        moe.moe_gemm(x, st, torch.tensor([0, 5], dtype=torch.int32), fmt)
    with pytest.raises(ValueError, match="must not fall"):
        moe.moe_gemm(x, st, torch.tensor([0, 4, 2, 5], dtype=torch.int32), fmt)
    with pytest.raises(ValueError, match="from 0 to m=5"):
        moe.moe_gemm(x, st, torch.tensor([0, 1, 2, 4], dtype=torch.int32), fmt)
    with pytest.raises(Exception, match="differs from the experts' format"):
        moe.moe_gemm(x, st, _offsets([1, 2, 2]), "a-bf16_w-u4g64-sbf16_c-bf16")
    with pytest.raises(TypeError, match="StackedExperts"):
        moe.moe_gemm(x, packed, _offsets([1, 2, 2]), fmt)
    for bad in (-3, 2.5, True):
        with pytest.raises(ValueError, match="assignments must be a non-negative int"):
            moe.moe_gemm(x, st, _offsets([1, 2, 2]), fmt, assignments=bad)
    import humming_aot as ha
    from humming_aot import reference as R

    wide = ha.pack_weight(R.quantize_weight(torch.randn(96, 128), "u4g128-sbf16"), layout="generic")
    with pytest.raises(ValueError, match="experts must match"):
        moe.stack_experts([packed[0], wide])


def _ref_masked(x, qs, counts):
    """[E, capacity, n] in fp64: each expert's first counts[e] rows times its weight, zeros after."""
    from humming_aot import reference as R

    e, cap, _ = x.shape
    ws = [R.dequantize_weight(q).double() for q in qs]
    out = torch.zeros(e, cap, ws[0].shape[0], dtype=torch.float64)
    for i, w in enumerate(ws):
        c = int(counts[i])
        out[i, :c] = x[i, :c].double() @ w.T
    return out


@pytest.mark.parametrize("fmt", ["u4g128-sbf16", "u4g64-sbf16-zi"])
def test_moe_gemm_masked_on_the_cpu_is_each_experts_gemm(fmt):
    """Slots of a fixed capacity, counts from none to all of it: each expert's rows equal its dense
    GEMM, the reference holds, and the rest of every slot is zeros (on the CPU)."""
    import humming_aot as ha

    qs, packed, st = _stacked(5, 48, 256, fmt, "generic", 8)
    counts = torch.tensor([3, 0, 7, 1, 7], dtype=torch.int32)
    x = torch.randn(5, 7, 256, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    gemm_fmt = f"a-bf16_w-{fmt}_c-bf16"
    y = moe.moe_gemm_masked(x, st, counts, gemm_fmt)
    assert y.shape == (5, 7, 48) and y.dtype == torch.bfloat16
    for e in range(5):
        c = int(counts[e])
        if c:
            assert torch.equal(y[e, :c], ha.gemm(x[e, :c], packed[e], gemm_fmt)), e
        assert not y[e, c:].any(), e
    ref = _ref_masked(x, qs, counts)
    assert (y.double() - ref).norm() / ref.norm() <= 2.0**-7
    # A strided view (every other slot row) is copied to evenly spaced rows, not misread.
    wide = torch.randn(5, 14, 256, generator=torch.Generator().manual_seed(10)).to(torch.bfloat16)
    y2 = moe.moe_gemm_masked(wide[:, ::2], st, counts, gemm_fmt)
    assert torch.equal(y2, moe.moe_gemm_masked(wide[:, ::2].contiguous(), st, counts, gemm_fmt))


def test_moe_gemm_masked_bad_input_is_named():
    qs, packed, st = _stacked(3, 64, 128, "u4g128-sbf16", "generic", 2)
    x = torch.randn(3, 4, 128).to(torch.bfloat16)
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    with pytest.raises(ValueError, match=r"takes activations \[3 experts, capacity, k\]"):
        moe.moe_gemm_masked(x[:2], st, torch.tensor([1, 1], dtype=torch.int32), fmt)
    with pytest.raises(ValueError, match=r"expert row counts must be a tensor \[3\]"):
        moe.moe_gemm_masked(x, st, torch.tensor([1, 1], dtype=torch.int32), fmt)
    with pytest.raises(ValueError, match="takes 0 to the capacity, 4"):
        moe.moe_gemm_masked(x, st, torch.tensor([1, 5, 0], dtype=torch.int32), fmt)
    with pytest.raises(ValueError, match="takes 0 to the capacity"):
        moe.moe_gemm_masked(x, st, torch.tensor([1, -1, 0], dtype=torch.int32), fmt)


# ---- grouped GEMMs with 8-bit activations ---------------------------------------------------------

# W8A8 MoE formats: DeepSeek-V3's FP8 experts (128 x 128 weight blocks, activations in 1 x 128
# groups) and per-channel FP8 experts (per-token activation scales).
A8_MOE = [("e4m3g128n128-sf32", "e4m3-g128"), ("e4m3gc-sf32", "e4m3-pt")]
# With W4A8 experts (4-bit codes in the sm90 W4A8 kernels' layout 4; grouped tiles in dev since session 42):
# weight format, activation format, layout.
A8_MOE_LAYOUTS = [(w, a, "generic") for w, a in A8_MOE] + [
    ("u4g128-sbf16", "e4m3-pt", "sm90a8"),
    ("u4gc-sbf16", "e4m3-pt", "sm90a8"),
    ("e2m1gc-sbf16", "e4m3-pt", "sm90a8"),
    ("e2m1g128-sbf16", "e4m3-pt", "sm90a8"),
]


def _dequantized_act(codes, scales, act):
    """fp64 activations from their 8-bit codes and fp32 scales in activation format ``act`` (one
    scale per token, or per token and group of inputs, the last group partial)."""
    from humming_aot import formats as F

    k = codes.shape[-1]
    group = F.parse_activation_format(act).group_k or k
    return codes.float().double() * scales.double().repeat_interleave(group, dim=-1)[..., :k]


def _ref_grouped_a8(codes, scales, act, qs, off):
    """fp64: each expert's rows of the dequantized activations times its dequantized weight."""
    from humming_aot import reference as R

    a = _dequantized_act(codes, scales, act)
    return torch.cat([a[off[e] : off[e + 1]] @ R.dequantize_weight(q).double().T for e, q in enumerate(qs)])


@pytest.mark.parametrize("wfmt,act,layout", A8_MOE_LAYOUTS)
def test_moe_gemm_with_8bit_activations_on_the_cpu_is_each_experts_gemm(wfmt, act, layout):
    """8-bit activation codes and their scales through the grouped GEMM, contiguous and masked:
    each expert's rows equal its dense GEMM of those rows and their scales, the fp64 product of
    the dequantized operands holds, and missing or misshapen scales are named."""
    import humming_aot as ha

    qs, packed, st = _stacked(5, 256, 384, wfmt, layout, 12)
    counts = [3, 0, 9, 1, 4]
    off = _offsets(counts)
    x = torch.randn(17, 384, generator=torch.Generator().manual_seed(13)).to(torch.bfloat16)
    codes, scales = ha.quantize_act(x, act)
    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    y = moe.moe_gemm(codes, st, off, fmt, a_scales=scales)
    assert y.shape == (17, 256) and y.dtype == torch.bfloat16
    for e in range(5):
        r = slice(int(off[e]), int(off[e + 1]))
        if counts[e]:
            assert torch.equal(y[r], ha.gemm(codes[r], packed[e], fmt, a_scales=scales[r])), e
    ref = _ref_grouped_a8(codes, scales, act, qs, off)
    assert (y.double() - ref).norm() / ref.norm() <= 2.0**-7
    # The masked layout: each expert's rows in its slot of 9 (quantization is per row, so the
    # slots' codes are the same rows' codes).
    slots = torch.zeros(5, 9, 384, dtype=torch.bfloat16)
    for e in range(5):
        slots[e, : counts[e]] = x[off[e] : off[e + 1]]
    mcodes, mscales = ha.quantize_act(slots.reshape(45, 384), act)
    ym = moe.moe_gemm_masked(
        mcodes.reshape(5, 9, 384), st, torch.tensor(counts, dtype=torch.int32), fmt,
        a_scales=mscales.reshape(5, 9, -1),
    )  # fmt: skip
    for e in range(5):
        assert torch.equal(ym[e, : counts[e]], y[off[e] : off[e + 1]]), e
    with pytest.raises(Exception, match="needs activation scales"):
        moe.moe_gemm(codes, st, off, fmt)
    with pytest.raises(Exception, match="activation scales has shape"):
        moe.moe_gemm(codes, st, off, fmt, a_scales=scales[:-1])
    with pytest.raises(Exception, match="activation scales has shape"):
        moe.moe_gemm_masked(mcodes.reshape(5, 9, 384), st, torch.tensor(counts, dtype=torch.int32), fmt,
                            a_scales=mscales)  # fmt: skip


def _ref_moe_a8(x, logits, w1, w2, fmt, act, top_k):
    """_ref_moe with each GEMM's input quantized as the layer quantizes it: rounded to bf16, then
    to 8-bit codes with their scales (the reference quantizer), dequantized; the gate-up output
    rounded to bf16 before the activation, as the layer's GEMM returns it (an FP8 code is 2^-3 of
    its value apart from the next, so the inputs of each quantization follow the layer's)."""
    from humming_aot import reference as R

    def q(v):
        codes, scales = R.quantize_activation(v.to(torch.bfloat16).float()[None], act)
        return _dequantized_act(codes, scales, act)[0]

    deq = lambda w: R.dequantize_weight(R.quantize_weight(w, fmt)).double()  # noqa: E731
    d1, d2 = [deq(w) for w in w1], [deq(w) for w in w2]
    w, ids = _ref_topk(logits, top_k, "softmax", True)
    f = w2.shape[2]
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            hid = (d1[e] @ q(x[t])).to(torch.bfloat16).float()
            out[t] += float(w[t, j]) * (d2[e] @ q(torch.nn.functional.silu(hid[:f]) * hid[f:]))
    return out


@pytest.mark.parametrize("wfmt,act", A8_MOE)
def test_quant_moe_with_8bit_activations_runs_grouped_gemms_and_matches_the_reference(wfmt, act):
    """A layer of FP8 experts with FP8 activations runs the grouped GEMMs (on the CPU, the
    reference's), matches the token-by-token reference that quantizes each GEMM's input, and names
    the grouped sm90 instances a GPU would run where the build has them."""
    import humming_aot as ha

    w1, w2 = _experts(8, 256, 128, 17)
    layer = ha.QuantMoE.from_float(w1, w2, wfmt, 2, act_format=act)
    g = torch.Generator().manual_seed(18)
    x = torch.randn(11, 256, generator=g).to(torch.bfloat16)
    logits = torch.randn(11, 8, generator=g)
    assert layer._grouped_on(x)
    got = layer(x, logits)
    assert got.shape == (11, 256) and got.dtype == torch.bfloat16
    ref = _ref_moe_a8(x.float(), logits, w1, w2, wfmt, act, 2)
    err = (got.double() - ref).norm() / ref.norm()
    assert err <= _MOE_TOL, f"relative error {err:.2e}"
    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    if _sm90_instances(fmt):
        got = layer.instances(64, cc=90, sms=132)
        assert all(name.startswith(f"sm90_wgmma_moe_{fmt}_") for name in got.values()), got


def test_grouped_and_dense_instances_refuse_each_others_gemms():
    """A grouped (scheduler moe) instance forced on a dense GEMM, or a dense one on a grouped GEMM,
    is refused with a sentence naming the scheduler kinds (checked on the registry, no GPU)."""
    from humming_aot import registry
    from humming_aot._ext import C

    grouped = [i for i in registry.instances() if i.scheduler == "moe"]
    assert grouped, "every build profile has grouped instances (tools/matrix/sm90_moe.json)"
    i = grouped[0]
    fmt = f"a-{i.act_type}_w-{i.name.split('_w-')[1].split('_c-')[0]}_c-{i.out_type}"
    ok, why = C.check_instance(i.name, fmt, i.layout, 256, 1024, 16)
    assert not ok and "grouped (MoE) GEMMs only" in why, why
    qs, packed, st = _stacked(2, 64, 128, "u4g128-sbf16", "sm90", 3)
    dense = next(d.name for d in registry.instances() if d.name.startswith("generic_"))
    x = torch.randn(3, 128).to(torch.bfloat16)
    off = torch.tensor([0, 1, 3], dtype=torch.int32)
    # The CPU runs the reference whatever the instance; the instance is checked where it runs, so
    # the check is the registry's (the GPU test below forces real instances).
    assert moe.moe_gemm(x, st, off, "a-bf16_w-u4g128-sbf16_c-bf16", instance=dense).shape == (3, 64)


def _expected_tiles(assignments, experts, n, tile_m, tile_n):
    """A grouped launch's expected tiles, written out: the experts a uniform routing of
    `assignments` rows touches on average (one minus the chance that none of the rows picks an
    expert, times the experts), each in whole row tiles, times the channel tiles."""
    touched = experts * (1 - (1 - 1 / experts) ** assignments)
    return max(touched, -(-assignments // tile_m)) * -(-n // tile_n)


def _poisson_row_tiles(mean, height):
    """The expected row tiles of one expert whose rows are Poisson with this mean, in tiles of this
    height, written out: the sum over every row count x of ceil(x / height) times its probability
    (summed directly up to far past the mean)."""
    total, p = 0.0, math.exp(-mean)
    for x in range(1, int(mean + 40 * math.sqrt(mean) + 60)):
        p *= mean / x
        total += -(-x // height) * p
    return total


def test_expected_row_tiles_of_poisson_counts():
    """humming.h expected_row_tiles: the expected row tiles of a Poisson count, against the sum
    written out; closed forms where they exist (height 1: the mean; a height no count reaches: the
    chance of at least one row)."""
    from humming_aot._ext import C

    for mean in (0.05, 1.0, 7.5, 16.0, 64.0, 200.0):
        assert C.expected_row_tiles(mean, 1) == pytest.approx(mean, rel=1e-9)
        for height in (8, 16, 32, 64, 128, 256):
            want = _poisson_row_tiles(mean, height)
            assert C.expected_row_tiles(mean, height) == pytest.approx(want, rel=1e-9), (mean, height)
    for mean in (0.05, 1.0, 3.0):
        assert C.expected_row_tiles(mean, 4096) == pytest.approx(1 - math.exp(-mean), rel=1e-9)
    assert C.expected_row_tiles(0.0, 8) == 0
    assert C.grouped_row_tile_fixed_rows >= 0
    with pytest.raises(ValueError, match="positive"):
        C.expected_row_tiles(4.0, 0)


def _grouped_height(per_expert, warp, costs):
    """The grouped tile height the rule picks, written out: per height the narrowest tile, its cost
    the table's c1, or for a height the table lacks the line between the nearest heights below and
    above that the build has with a table cost (on a side with none, the table's nearest height of
    that tile width; where a side has neither, rows plus the fixed part for all heights), times the
    expected row tiles; the least, the lower height among equals."""
    from humming_aot._ext import C

    narrowest = {}
    for i in warp:
        if i.tile[0] not in narrowest or i.tile[1] < narrowest[i.tile[0]].tile[1]:
            narrowest[i.tile[0]] = i
    table = {h: costs[(None, tuple(i.tile), 1)][1] for h, i in narrowest.items() if (None, tuple(i.tile), 1) in costs}
    cost = {}
    for h in narrowest:
        if h in table:
            cost[h] = table[h]
            continue
        width = narrowest[h].tile[1]
        anywhere = {t[0]: c[1] for (act, t, batch), c in costs.items() if act is None and batch == 1 and t[1] == width}
        below = {x: c for x, c in table.items() if x < h} or {x: c for x, c in anywhere.items() if x < h}
        above = {x: c for x, c in table.items() if x > h} or {x: c for x, c in anywhere.items() if x > h}
        if not below or not above:
            cost = {x: x + C.grouped_row_tile_fixed_rows for x in narrowest}
            break
        lo, hi = max(below), min(above)
        cost[h] = below[lo] + (h - lo) / (hi - lo) * (above[hi] - below[lo])
    work = {h: _poisson_row_tiles(per_expert, h) * cost[h] for h in narrowest}
    least = min(work.values())
    return narrowest[min(h for h, w in work.items() if w <= least * (1 + 1e-6))]


def test_grouped_height_rule_holds_on_the_committed_height_sweep():
    """The grouped tile height rule with the H200 table's tile costs, over session 29's sweep of
    every height (benchmarks/results/h100/tuning/h100-2026-12-05-s29-moe-heights.json, scored by
    tools/fit_grouped_heights.py): within 1 % of the fastest height in geometric mean by the sum of
    the two GEMMs' times and 0.5 % by the layer's, and better than the lowest tile that holds the
    mean; over session 40's sweep with the heights 24, 48 and 80, within 1 % and faster than without
    them; the tool's tile of each height is the narrowest grouped tile of that height in the matrix
    (of one 64-channel block a consumer warpgroup)."""
    import importlib.util
    import json
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("fit_grouped_heights", root / "tools" / "fit_grouped_heights.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    matrix = json.loads((root / "tools" / "matrix" / "sm90_moe.json").read_text())
    narrowest = {}
    for t in matrix["tiles"].values():
        # Two-block tiles are no height of the rule (registry.cpp two_blocks): only instance= takes them.
        if t.get("producer", "warp") == "warp" and not t.get("split", False) and t.get("blocks", 1) == 1:
            shape = (64 * t["consumers"], 64 * t["k_atoms"])
            narrowest[t["bm"]] = min(narrowest.get(t["bm"], shape), shape)
    assert {h: f"{h}x{bn}x{bk}" for h, (bn, bk) in narrowest.items()} == tool.TILE_KEYS
    sweep = root / "benchmarks/results/h100/tuning/h100-2026-12-05-s29-moe-heights.json"
    rule = tool.table_rule(root / "python/humming_aot/tables/h200.json")
    for metric, bound in (("parts", 1.01), ("layer", 1.005)):
        points = tool.load_points([sweep], metric)
        mean, _, _, n = tool.score(points, rule)
        before, _, _, _ = tool.score(points, tool.lowest_rule)
        assert n >= 30 and mean <= bound and mean < before, (metric, mean, before, n)
    # Session 40's sweep with the heights between the powers of two (24, 48, 80; H100): the rule
    # with them within 1 % of the fastest height, and better than the same rule without them.
    sweep = root / "benchmarks/results/h100/tuning/h100-2026-12-06-s40-moe-heights.json"
    powers = lambda rows, heights: rule(rows, [h for h in heights if h & (h - 1) == 0])  # noqa: E731
    for metric in ("parts", "layer"):
        points = tool.load_points([sweep], metric)
        mean, worst, _, n = tool.score(points, rule)
        without, _, _, _ = tool.score(points, powers)
        assert n >= 6 and mean <= 1.01 and worst <= 1.02 and mean < 0.95 * without, (metric, mean, worst, without)


@pytest.mark.parametrize("experts,n,k", [(128, 1536, 2048), (128, 2048, 768), (256, 4096, 7168), (8, 28672, 4096)])
def test_grouped_choice_follows_the_tile_height_width_and_walk_rules(experts, n, k):
    """The default grouped instance (select_grouped_instance then grouped_pick, as humming.moe_gemm
    runs it) on this build's registry, for a described H200 (132 multiprocessors): with the routed
    rows unknown, the narrowest tile of the height whose expected row tiles (Poisson counts around
    the rows per expert) times one tile's cost (the H200 table's) are least, its warp walk; given them,
    twice the channels where the build has that tile and the narrow tiles would be more than one per
    multiprocessor, then the lone walk from 8 tiles per multiprocessor (fewer below 128 experts, in
    proportion); never a tile of two 64-channel blocks a warpgroup."""
    from humming_aot import dispatch, registry
    from humming_aot._ext import C

    fmt, sms = "a-bf16_w-u4g128-sbf16_c-bf16", 132
    # Tiles of two 64-channel blocks a consumer warpgroup are no default choice (registry.cpp
    # two_blocks): they are left out of what the rules see.
    grouped = {
        i.name: i
        for i in registry.instances()
        if i.name.startswith(f"sm90_wgmma_moe_{fmt}_") and not dispatch.two_blocks(i)
    }
    assert grouped, "every build profile has grouped u4g128 bf16 instances (tools/matrix/sm90_moe.json)"
    warp = [i for i in grouped.values() if not i.name.endswith("_lone")]
    costs = dispatch._tile_costs(dispatch._table_for(90, sms, "NVIDIA H200"))
    for per_expert in (1, 8, 9, 16, 40, 64, 100, 256):
        base = _grouped_height(per_expert, warp, costs)
        got = C.select_grouped_instance(fmt, 3, n, k, per_expert, experts, -1, 90, sms)
        assert got == base.name, (per_expert, got, base.name)
        for tokens in (1, 8, 64, 1024):
            assignments = tokens * 8
            want = base
            wide = [i for i in grouped.values() if i.tile[0] == base.tile[0] and i.tile[1] == 2 * base.tile[1]]
            wide = [i for i in wide if not i.name.endswith("_lone")]
            if wide and _expected_tiles(assignments, experts, n, base.tile[0], base.tile[1]) > sms:
                want = wide[0]
            if _expected_tiles(assignments, experts, n, want.tile[0], want.tile[1]) >= 8 * min(1, experts / 128) * sms:
                want = grouped.get(want.name + "_lone", want)
            got = C.select_grouped_instance(fmt, 3, n, k, per_expert, experts, assignments, 90, sms)
            assert got == want.name, (per_expert, tokens, got, want.name)
    with pytest.raises(ValueError, match="at least one expert"):
        C.select_grouped_instance(fmt, 3, n, k, 1, 0, 8, 90, sms)


@pytest.mark.parametrize(
    "experts,n,k", [(128, 1536, 2048), (8, 28672, 4096), (8, 4096, 14336), (128, 2048, 768), (8, 4096, 1024)]
)
def test_grouped_choice_past_the_height_rule_is_the_tallest_two_block_tile(experts, n, k):
    """Above 256 rows per expert, where K is at least 1024 (humming.h kGroupedTwoBlockMinK), the
    default grouped instance is the tallest tile of two 64-channel blocks a warpgroup this build has
    (its lone walk where built), whatever the routed rows; on a shallower K (Qwen3-30B-A3B's down,
    K = 768), or where the build has none, a one-block grouped instance (select_instance's choice
    among them)."""
    from humming_aot import dispatch, registry
    from humming_aot._ext import C

    fmt, sms = "a-bf16_w-u4g128-sbf16_c-bf16", 132
    grouped = [i for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")]
    assert grouped, "every build profile has grouped u4g128 bf16 instances (tools/matrix/sm90_moe.json)"
    two = [i for i in grouped if dispatch.two_blocks(i) and not i.name.endswith("_ks")]
    want = None
    if two and k >= 1024:
        tallest = max(i.tile[0] for i in two)
        tall = [i for i in two if i.tile[0] == tallest]
        want = next((i for i in tall if i.name.endswith("_lone")), tall[0]).name
    for per_expert in (257, 512, 1024, 4096):
        for assignments in (-1, per_expert * experts):
            got = C.select_grouped_instance(fmt, 3, n, k, per_expert, experts, assignments, 90, sms)
            if want is not None:
                assert got == want, (per_expert, assignments, got)
            else:
                inst = next(i for i in grouped if i.name == got)
                assert not dispatch.two_blocks(inst), got
    # At the height rule's last row count, no two-block tile.
    got = C.select_grouped_instance(fmt, 3, n, k, 256, experts, -1, 90, sms)
    assert not dispatch.two_blocks(next(i for i in grouped if i.name == got)), got


def _sm90_instances(fmt):
    from humming_aot import registry

    return [i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("load", ["uniform", "skewed", "one", "empty", "edges"])
def test_moe_gemm_on_the_sm90_kernels_matches_the_reference(load):
    """Every built grouped sm90 tile of four formats (e2m1 with bf16 scales: gpt-oss's MXFP4 experts
    after their exact scale conversion, in dev builds) runs grouped rows: expert
    boundaries inside tiles, experts with no rows, rows not a multiple of any tile, a k of 2880
    (gpt-oss); "edges": experts whose last row tile is full, or one row short of or past it."""
    from humming_aot import registry

    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    tested = 0
    for wfmt in ("u4g128-sbf16", "u4g128-sbf16-zi", "u8gc-sbf16", "e2m1g32-sbf16"):
        fmt = f"a-bf16_w-{wfmt}_c-bf16"
        names = _sm90_instances(fmt)
        if not names:
            continue
        tested += len(names)
        e, n, k = 12, 320, 2880 if wfmt != "u4g128-sbf16" else 1024
        qs, packed, st = _stacked(e, n, k, wfmt, "sm90", 21, "cuda")
        g = torch.Generator().manual_seed(4)
        if load == "uniform":
            counts = [int(v) for v in torch.randint(20, 70, (e,), generator=g)]
        elif load == "skewed":
            counts = [300 // (i + 1) for i in range(e)]
        elif load == "one":
            counts = [0] * e
            counts[7] = 413
        elif load == "edges":
            counts = [16, 17, 31, 32, 33, 47, 48, 64, 65, 81, 160, 161]
        else:
            counts = [0, 5, 0, 0, 131, 0, 0, 0, 1, 0, 0, 0]
        off = _offsets(counts)
        x = torch.randn(sum(counts), k, generator=g).to(torch.bfloat16)
        ref = _ref_grouped(x, qs, off)
        for name in names:
            y = moe.moe_gemm(x.cuda(), st, off.cuda(), fmt, instance=name).cpu()
            err = (y.double() - ref).norm() / ref.norm()
            assert err <= 2.0**-7, (name, load, float(err))
        # the library's own choice, and with routed-row counts that pick either walk over the tiles
        for routed in (None, 1, sum(counts), 10**6):
            y = moe.moe_gemm(x.cuda(), st, off.cuda(), fmt, assignments=routed).cpu()
            assert (y.double() - ref).norm() / ref.norm() <= 2.0**-7, routed
        dense = names[0].replace("_moe_", "_dense_")
        if any(i.name == dense for i in registry.instances()):
            with pytest.raises(Exception, match="runs dense GEMMs"):
                moe.moe_gemm(x.cuda(), st, off.cuda(), fmt, instance=dense)
    assert tested > 0, "this build has no grouped sm90 instance of the tested formats"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("load", ["uniform", "skewed", "empty", "edges"])
def test_moe_gemm_with_8bit_activations_on_the_sm90_kernels_matches_the_reference(load):
    """Every built grouped sm90 tile of the W8A8 MoE formats (and of W4A8, where built) runs grouped rows of FP8 codes
    quantized on the GPU: expert boundaries inside tiles and at rows that are not a multiple of 4
    (where the tokens-M tiles' activation scale runs start early), experts with no rows, n and k
    that are not multiples of 128 (320 x 2880); the library's choice too, the masked layout, and a
    CUDA graph of the call. "edges": experts whose last row tile holds one row less, as many and
    one more than 16, 32, 48, 64 and 80 rows, and than the tiles themselves."""
    import humming_aot as ha

    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    tested = 0
    for wfmt, act, layout in A8_MOE_LAYOUTS:
        fmt = f"a-{act}_w-{wfmt}_c-bf16"
        names = _sm90_instances(fmt)
        if not names:
            continue
        tested += len(names)
        e, n, k = 12, 320, 2880
        qs, packed, st = _stacked(e, n, k, wfmt, layout, 31, "cuda")
        g = torch.Generator().manual_seed(5)
        if load == "uniform":
            counts = [int(v) for v in torch.randint(20, 200, (e,), generator=g)]
        elif load == "skewed":
            counts = [600 // (i + 1) for i in range(e)]
        elif load == "edges":
            counts = [16, 17, 31, 32, 33, 47, 48, 64, 65, 81, 160, 161]
        else:
            counts = [0, 5, 0, 0, 131, 0, 0, 0, 1, 0, 0, 0]
        off = _offsets(counts)
        x = torch.randn(sum(counts), k, generator=g).to(torch.bfloat16)
        codes, scales = ha.quantize_act(x.cuda(), act)
        ref = _ref_grouped_a8(codes.cpu(), scales.cpu(), act, qs, off)
        offd = off.cuda()
        for name in names:
            y = moe.moe_gemm(codes, st, offd, fmt, instance=name, a_scales=scales).cpu()
            err = (y.double() - ref).norm() / ref.norm()
            assert err <= 2.0**-7, (name, load, float(err))
        for routed in (None, sum(counts)):
            y = moe.moe_gemm(codes, st, offd, fmt, assignments=routed, a_scales=scales)
            assert (y.cpu().double() - ref).norm() / ref.norm() <= 2.0**-7, routed
        # masked: each expert's rows in a slot of the largest count plus 3
        cap = max(counts) + 3
        slot_codes = torch.zeros(e, cap, k, dtype=codes.dtype, device="cuda")
        slot_scales = torch.ones(e, cap, scales.shape[1], device="cuda")
        for i in range(e):
            slot_codes[i, : counts[i]] = codes[off[i] : off[i + 1]]
            slot_scales[i, : counts[i]] = scales[off[i] : off[i + 1]]
        cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
        ym = moe.moe_gemm_masked(slot_codes, st, cnt, fmt, a_scales=slot_scales).cpu()
        got = torch.cat([ym[i, : counts[i]] for i in range(e)])
        assert (got.double() - ref).norm() / ref.norm() <= 2.0**-7, "masked"
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = moe.moe_gemm(codes, st, offd, fmt, assignments=sum(counts), a_scales=scales)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, y), "graph replay"
    if tested == 0:
        pytest.skip("this build has no grouped sm90 instance with 8-bit activations (tools/matrix/sm90_a8_moe.json)")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("wfmt,act", [A8_MOE[0], ("e2m1gc-sbf16", "e4m3-pt")])
def test_quant_moe_with_8bit_activations_on_the_grouped_kernels_matches_the_cpu_and_captures(wfmt, act):
    """A DeepSeek-style layer (FP8 experts in 128 x 128 blocks, FP8 activations in 1 x 128
    groups) and a W4A8 one (e2m1 experts, per-token FP8 activations: the activation between the
    GEMMs quantized per token, moe.activate_quantize) on the grouped kernels: the GPU's result
    against the CPU's at 1, 37 and 300 tokens, no per-expert loop, and a CUDA graph of the whole
    layer that replays the eager result."""
    import humming_aot as ha

    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    if not _sm90_instances(f"a-{act}_w-{wfmt}_c-bf16"):
        pytest.skip(f"this build has no grouped sm90 instance of a-{act}_w-{wfmt}_c-bf16")
    w1, w2 = _experts(16, 512, 256, 23)
    cpu = ha.QuantMoE.from_float(w1, w2, wfmt, 4, act_format=act)
    gpu = ha.QuantMoE.from_float(w1, w2, wfmt, 4, act_format=act, device="cuda")
    g = torch.Generator().manual_seed(24)
    for tokens in (1, 37, 300):
        x = torch.randn(tokens, 512, generator=g).to(torch.bfloat16)
        logits = torch.randn(tokens, 16, generator=g)
        assert gpu._grouped_on(x.cuda())
        want = cpu(x, logits)
        got = gpu(x.cuda(), logits.cuda()).cpu()
        err = (got.double() - want.double()).norm() / want.double().norm()
        assert err <= 2.0**-6, (tokens, float(err))
    xd, ld = x.cuda(), logits.cuda()
    eager = gpu(xd, ld)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = gpu(xd, ld)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def _tile(name: str) -> tuple[int, int, int]:
    """Tokens, channels and inputs of an instance's tile, from its name."""
    import re

    return tuple(int(v) for v in re.search(r"_t(\d+)x(\d+)x(\d+)_", name).groups())


def _split_shares(name: str, assignments: int, experts: int, n: int, k: int, sms: int) -> int:
    """The K shares a grouped launch of instance `name` would give each tile, written out from the
    rule's definition (scheduler/moe.h): the launch's bound on its tiles (whole row tiles of the
    routed rows plus one partial tile per expert that may have rows, times the channel tiles), a
    block per share, each share at least 8 K tiles deep. n and k need no padding here."""
    tm, tn, tk = _tile(name)
    bound = (assignments // tm + min(assignments, experts)) * -(-n // tn)
    return max(1, min(sms // bound, (k // tk) // 8))


def test_k_split_grouped_instances_are_chosen_only_where_the_tiles_leave_the_gpu_idle():
    """The grouped tiles that split K (names ending _ks) are never a base choice, and a call takes
    one only as the split twin of its tile (the 256-channel one where built: fewer tiles, more
    shares) where that twin would give each tile at least 4 K shares (humming.h grouped_split_k):
    Mixtral-8x7B's down GEMM at one token does where the build has the 256-channel split tile;
    Qwen3-30B-A3B's layers and larger batches do not."""
    from humming_aot import registry
    from humming_aot._ext import C

    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    names = {i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")}
    assert names, "every build profile has grouped u4g128 bf16 instances"

    def split_twin(base: str) -> str | None:
        """The split twin the rule weighs: of the 256-channel tile of base's height where built."""
        tm, tn, _ = _tile(base)
        twins = {
            _tile(n)[1]: n for n in names if n.endswith("_ks") and _tile(n)[0] == tm and _tile(n)[1] in (tn, 2 * tn)
        }
        return twins.get(2 * tn, twins.get(tn))

    chose_split = 0
    for experts, n, k in ((8, 4096, 14336), (8, 28672, 4096), (128, 1536, 2048), (128, 2048, 768)):
        for per_expert in (1, 2, 8, 16, 64, 256):
            base = C.select_grouped_instance(fmt, 3, n, k, per_expert, experts, -1, 90, 132)
            assert not base.endswith("_ks"), (experts, per_expert, base)
            twin = split_twin(base)
            for assignments in (1, 2, 4, 8, 16, 1024, 10**6):
                got = C.select_grouped_instance(fmt, 3, n, k, per_expert, experts, assignments, 90, 132)
                split = twin is not None and _split_shares(twin, assignments, experts, n, k, 132) >= 4
                assert got == twin if split else not got.endswith("_ks"), (experts, n, k, assignments, base, got)
                chose_split += split
    if any(n.endswith("_ks") for n in names):  # one routed row on Mixtral's down layer splits any 8- or 16-row tile
        assert chose_split > 0
    base = C.select_grouped_instance(fmt, 3, 4096, 14336, 1, 8, -1, 90, 132)
    wide = [n for n in names if n.endswith("_ks") and _tile(n)[:2] == (_tile(base)[0], 2 * _tile(base)[1])]
    if wide:
        assert C.select_grouped_instance(fmt, 3, 4096, 14336, 1, 8, 2, 90, 132) == wide[0], base
    for experts, n, k, assignments in ((128, 1536, 2048, 8), (128, 2048, 768, 8), (8, 4096, 14336, 4)):
        got = C.select_grouped_instance(fmt, 3, n, k, 1, experts, assignments, 90, 132)
        assert not got.endswith("_ks"), (experts, n, k, assignments, got)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_k_split_grouped_instances_match_the_reference_deterministically():
    """The grouped tiles that split K into shares (names ending _ks; the 8-row ones of u4g128 bf16 in
    dev builds, t16 in +experimental ones) on a launch of few rows over a deep K, where every tile is split (4 experts, 9 rows,
    k = 8192: up to 8 shares per tile): against the reference, bitwise equal on a rerun (the
    shares' partials add in a fixed order and the tile counters return to zero), and in a CUDA graph."""
    from humming_aot import registry

    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    tested = 0
    for wfmt in ("u4g128-sbf16", "u4g128-sbf16-zi"):
        fmt = f"a-bf16_w-{wfmt}_c-bf16"
        names = [i.name for i in registry.instances() if i.name.startswith(f"sm90_wgmma_moe_{fmt}_")]
        names = [n for n in names if n.endswith("_ks")]
        if not names:
            continue
        e, n, k = 4, 256, 8192
        qs, packed, st = _stacked(e, n, k, wfmt, "sm90", 51, "cuda")
        counts = [3, 0, 5, 1]
        off = _offsets(counts).cuda()
        x = torch.randn(sum(counts), k, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16)
        ref = _ref_grouped(x, qs, off.cpu())
        xd = x.cuda()
        for name in names:
            tested += 1
            y = moe.moe_gemm(xd, st, off, fmt, instance=name)
            err = (y.cpu().double() - ref).norm() / ref.norm()
            assert err <= 2.0**-7, (name, float(err))
            assert torch.equal(moe.moe_gemm(xd, st, off, fmt, instance=name), y), name
            moe.moe_gemm(xd, st, off, fmt, instance=name)  # warm-up before the capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                yg = moe.moe_gemm(xd, st, off, fmt, instance=name)
            graph.replay()
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(yg, y), name
    if tested == 0:
        pytest.skip(
            "this build has no K-split grouped instance (dev builds the 8-row ones, ci+experimental a 16-row one)"
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_default_choice_splits_k_where_few_tiles_meet_a_deep_k_and_stays_right():
    """A decode launch of few experts on a narrow, deep layer (Mixtral's down GEMM in small: 2 routed
    rows over 8 experts, n = 512, k = 8192): the library's own choice is a K-split tile where the
    build has one (grouped_split_k: 8 shares a tile), and its output matches the reference, bitwise
    on a rerun and in a CUDA graph; with many routed rows the choice splits nothing."""
    from humming_aot._ext import C

    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    if not any(n.endswith("_ks") for n in _sm90_instances(fmt)):
        pytest.skip("this build has no K-split grouped instance of u4g128 (dev builds them)")
    e, n, k = 8, 512, 8192
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = C.select_grouped_instance(fmt, 3, n, k, 1, e, 2, 90, sms)
    assert chosen.endswith("_ks"), chosen
    assert not C.select_grouped_instance(fmt, 3, n, k, 1, e, 1024, 90, sms).endswith("_ks")
    qs, packed, st = _stacked(e, n, k, "u4g128-sbf16", "sm90", 71, "cuda")
    counts = [0, 1, 0, 0, 0, 1, 0, 0]
    off = _offsets(counts).cuda()
    x = torch.randn(2, k, generator=torch.Generator().manual_seed(72)).to(torch.bfloat16).cuda()
    y = moe.moe_gemm(x, st, off, fmt, rows_per_expert=1, assignments=2)
    ref = _ref_grouped(x.cpu(), qs, off.cpu())
    assert (y.cpu().double() - ref).norm() / ref.norm() <= 2.0**-7
    assert torch.equal(moe.moe_gemm(x, st, off, fmt, rows_per_expert=1, assignments=2), y)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        yg = moe.moe_gemm(x, st, off, fmt, rows_per_expert=1, assignments=2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(yg, y)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("activation", ["silu", "swiglu-oai"])
def test_moe_gemm_activation_on_the_sm90_kernels_is_bitwise_the_gemm_then_activate(activation):
    """The gated activation in the grouped kernels' epilogue (GemmArgs::glu), on every built grouped
    tile of u4g128 (symmetric and -zi), forced by name: bit for bit the same tile's plain GEMM
    followed by moe.activate, with and without the experts' biases; F = 320 (the 256-channel tiles'
    last tile half past F), empty experts, an expert with more rows than a tile; the library's own
    choice; a layer whose F is no multiple of 64 (the plain GEMM and the activation kernel instead);
    a CUDA graph. Tiles of two 64-channel blocks a warpgroup pair a gate block with its up block
    in registers (t176x256x64 too); of the others, those of more than 128 rows (t256 has no shared
    memory for the exchange, t144 spilled with it) and those of three consumer warpgroups (192
    channels: the gate and up halves pair the warpgroups) refuse it by name.
    (Experimental: only +experimental builds take the epilogue's activation.)"""
    from humming_aot import dispatch, registry
    from humming_aot._ext import C

    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    if "experimental" not in C.build_info()["profile"]:
        pytest.skip("the epilogue's activation is experimental: this build's profile has no +experimental")
    instances = {i.name: i for i in registry.instances()}
    tested = 0
    for wfmt in ("u4g128-sbf16", "u4g128-sbf16-zi"):
        fmt = f"a-bf16_w-{wfmt}_c-bf16"
        names = _sm90_instances(fmt)
        if not names:
            continue
        e, f, k = 6, 320, 512
        qs, packed, st = _stacked(e, 2 * f, k, wfmt, "sm90", 61, "cuda")
        counts = [3, 0, 300, 1, 0, 17]
        off = _offsets(counts).cuda()
        x = torch.randn(sum(counts), k, generator=torch.Generator().manual_seed(62)).to(torch.bfloat16).cuda()
        bias = (torch.randn(e, 2 * f, generator=torch.Generator().manual_seed(63)) * 0.1).cuda()
        kw = {"limit": 3.0, "alpha": 1.5}
        ref = _ref_glu(x.cpu(), qs, off.cpu(), activation, None, **kw)
        for name in names:
            # Two-block tiles pair in registers; of the others, tiles of more than 128 tokens have
            # no exchange (t256: no shared memory; t144: spills), nor have those of an odd number of
            # consumer warpgroups (the threads are a producer warpgroup and the consumers).
            inst = instances[name]
            pairs = (inst.threads // 128 - 1) % 2 == 0 and inst.tile[0] <= 128
            no_exchange = not (dispatch.two_blocks(inst) or pairs)
            for b in (None, bias):
                if no_exchange:
                    with pytest.raises(Exception, match="cannot compute the activation in its epilogue"):
                        moe.moe_gemm(x, st, off, fmt, instance=name, activation=activation, activation_bias=b, **kw)
                    continue
                tested += 1
                y = moe.moe_gemm(x, st, off, fmt, instance=name, activation=activation, activation_bias=b, **kw)
                h = moe.moe_gemm(x, st, off, fmt, instance=name)
                o = off if b is not None else None
                expect = moe.activate(h, activation, bias=b, offsets=o, **kw)
                assert y.shape == (sum(counts), f) and torch.equal(y, expect), (name, b is None)
        y = moe.moe_gemm(x, st, off, fmt, activation=activation, assignments=sum(counts), **kw)
        assert (y.cpu().double() - ref).norm() / ref.norm() <= 2.0**-6
        expect = moe.activate(moe.moe_gemm(x, st, off, fmt, assignments=sum(counts)), activation, **kw)
        assert torch.equal(y, expect)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            yg = moe.moe_gemm(x, st, off, fmt, activation=activation, assignments=sum(counts), **kw)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(yg, y)
        # F = 200, no multiple of 64: the plain GEMM, then the activation kernel
        _, _, st2 = _stacked(e, 400, k, wfmt, "sm90", 64, "cuda")
        y2 = moe.moe_gemm(x, st2, off, fmt, activation=activation, **kw)
        assert torch.equal(y2, moe.activate(moe.moe_gemm(x, st2, off, fmt), activation, **kw))
    assert tested > 0, "this build has no grouped sm90 instance of u4g128 that computes the activation"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_moe_gemm_masked_on_the_sm90_kernels_matches_the_reference_and_captures():
    """Every built grouped tile of u4g128 on masked slots (counts 0, partial, the whole capacity):
    the counted rows match the reference; a graph replay with new counts written on the device
    computes the new rows (no host data in the call); counts past the capacity are clipped to it."""
    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    names = _sm90_instances(fmt)
    assert names, "this build has no grouped sm90 instance of u4g128-sbf16"
    e, cap, n, k = 8, 40, 192, 1536
    qs, packed, st = _stacked(e, n, k, "u4g128-sbf16", "sm90", 31, "cuda")
    x = torch.randn(e, cap, k, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    counts = torch.tensor([0, 1, 40, 17, 0, 33, 8, 39], dtype=torch.int32)
    ref = _ref_masked(x, qs, counts)
    xd = x.cuda()
    for name in names:
        y = moe.moe_gemm_masked(xd, st, counts.cuda(), fmt, instance=name).cpu()
        for i in range(e):
            c = int(counts[i])
            if c:
                err = (y[i, :c].double() - ref[i, :c]).norm() / ref[i, :c].norm()
                assert err <= 2.0**-7, (name, i, float(err))
    cd = counts.cuda()
    graph = torch.cuda.CUDAGraph()
    moe.moe_gemm_masked(xd, st, cd, fmt)  # warm-up outside the graph (plans, tensor maps)
    with torch.cuda.graph(graph):
        out = moe.moe_gemm_masked(xd, st, cd, fmt)
    new = torch.tensor([5, 0, 0, 40, 2, 0, 0, 11], dtype=torch.int32)
    cd.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    ref2 = _ref_masked(x, qs, new)
    for i in range(e):
        c = int(new[i])
        if c:
            assert (out[i, :c].cpu().double() - ref2[i, :c]).norm() / ref2[i, :c].norm() <= 2.0**-7, i
    over = torch.tensor([99, 0, 0, 0, 0, 0, 0, -3], dtype=torch.int32).cuda()
    y = moe.moe_gemm_masked(xd, st, over, fmt).cpu()
    ref3 = _ref_masked(x, qs, torch.tensor([40, 0, 0, 0, 0, 0, 0, 0]))
    assert (y[0].double() - ref3[0]).norm() / ref3[0].norm() <= 2.0**-7


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_grouped_gemm_offsets_past_the_rows_stay_inside_the_output():
    """Offsets that run past the activations (bad input the GPU cannot report) are clipped to the
    rows: no fault, and the first expert's rows, which lie inside, are right. Run under
    compute-sanitizer memcheck (scripts/gpu_sanitize.sh runs this test) it also shows that no
    access leaves the tensors."""
    if not torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    qs, packed, st = _stacked(3, 128, 512, "u4g128-sbf16", "sm90", 41, "cuda")
    x = torch.randn(10, 512, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    off = torch.tensor([0, 6, 200, 300], dtype=torch.int32).cuda()  # rows 6.. of expert 1 are past m
    ref = _ref_grouped(x[:6], qs[:1], torch.tensor([0, 6]))
    for name in _sm90_instances(fmt):
        y = torch.ops.humming.moe_gemm(x.cuda(), st.codes, st.scales, st.zeros, off, fmt, 3, 128, 512, 4, name)
        torch.cuda.synchronize()
        assert y.shape == (10, 128)
        assert (y[:6].cpu().double() - ref).norm() / ref.norm() <= 2.0**-7, name


# ---- the routing ops on the GPU against the CPU reference ------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize(
    "tokens,experts,top_k",
    [(1, 8, 2), (37, 128, 8), (64, 256, 8), (256, 1024, 4), (200, 2048, 4), (3000, 128, 4), (513, 4096, 6)],
)
def test_routing_ops_on_the_gpu_match_the_cpu_reference(tokens, experts, top_k):
    """top-k (both scorings, with and without renormalization and a correction bias; rows held in
    registers up to 256 experts, read in every round beyond), align (blocks of 1, 16 and 64 rows,
    loads from uniform to all on one expert, one chunk of assignments and more; the rank by per-warp
    counts up to 1024 experts, 1024 assignments in one chunk among them, and by the loop beyond),
    permute and combine (16-bit rows of whole 16-byte units and others): the GPU kernels give the
    CPU reference's experts, rows and combined outputs bitwise, and its top-k weights to fp32
    rounding."""
    g = torch.Generator().manual_seed(tokens * 7 + experts)
    logits = torch.randn(tokens, experts, generator=g)
    bias = torch.randn(experts, generator=g) * 0.1
    for scoring, renorm, b in (("softmax", True, None), ("sigmoid", False, bias), ("sigmoid", True, None)):
        w_c, i_c = moe.topk_route(logits, top_k, scoring=scoring, renormalize=renorm, correction_bias=b)
        w_g, i_g = moe.topk_route(logits.cuda(), top_k, scoring=scoring, renormalize=renorm, correction_bias=b)
        assert torch.equal(i_g.cpu(), i_c), (scoring, renorm)
        torch.testing.assert_close(w_g.cpu(), w_c, rtol=2e-6, atol=1e-7)
    ids = i_c.clone()
    ids[: tokens // 3] = experts - 1  # a skewed load: a third of the tokens on one expert
    x = torch.randn(tokens, 192, generator=g).to(torch.bfloat16)
    weights = w_c
    for block_m in (1, 16, 64):
        al_c = moe.moe_align(ids, experts, block_m)
        al_g = moe.moe_align(ids.cuda(), experts, block_m)
        for f in ("sorted_ids", "block_expert", "num_padded", "positions", "counts", "offsets"):
            assert torch.equal(getattr(al_g, f).cpu(), getattr(al_c, f)), (block_m, f)
        rows_c = moe.permute(x, al_c)
        rows_g = moe.permute(x.cuda(), al_g)
        assert torch.equal(rows_g.cpu(), rows_c), block_m
        y = (rows_c.float() * 1.5 - 0.25).to(torch.bfloat16)
        out_c = moe.combine(y, al_c, weights)
        out_g = moe.combine(y.cuda(), al_g, weights.cuda())
        assert torch.equal(out_g.cpu(), out_c), block_m
        # rows not of whole 16-byte units (190 channels), and fp32 ones: the kernel's narrow path
        for narrow in (y[:, :190].contiguous(), y[:, :20].float()):
            assert torch.equal(
                moe.combine(narrow.cuda(), al_g, weights.cuda()).cpu(), moe.combine(narrow, al_c, weights)
            )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("tokens,experts,top_k", [(5, 8, 2), (3, 64, 6), (40, 128, 8), (64, 256, 8), (3, 300, 4)])
def test_topk_on_the_gpu_breaks_ties_as_the_cpu(tokens, experts, top_k):
    """The GPU top-k's warp arg-max (integer reductions of an order-preserving key) on logits full
    of ties: few distinct values, zeros of both signs (equal, as ranks_before finds them), -inf;
    rows held in registers (one to eight 32-expert sets) and read in every round (300 experts). The
    CPU reference's experts bitwise (ties to the lower id), its weights to fp32 rounding."""
    g = torch.Generator().manual_seed(tokens * 31 + experts)
    tied = torch.randint(-2, 3, (tokens, experts), generator=g).float() * 0.5
    zeros = tied == 0
    tied[zeros] = torch.where(torch.rand(int(zeros.sum()), generator=g) < 0.5, -0.0, 0.0)
    tied[:, -1] = -math.inf
    assert bool((torch.signbit(tied) & zeros).any()) and bool((~torch.signbit(tied) & zeros).any())
    bias = torch.randint(-1, 2, (experts,), generator=g).float() * 0.25  # ties among the biased scores too
    for scoring, renorm, b in (("softmax", True, None), ("sigmoid", False, bias), ("sigmoid", True, None)):
        w_c, i_c = moe.topk_route(tied, top_k, scoring=scoring, renormalize=renorm, correction_bias=b)
        w_g, i_g = moe.topk_route(tied.cuda(), top_k, scoring=scoring, renormalize=renorm, correction_bias=b)
        assert torch.equal(i_g.cpu(), i_c), (scoring, renorm)
        torch.testing.assert_close(w_g.cpu(), w_c, rtol=2e-6, atol=1e-7)
        if b is None:  # ranked by the logit: the readable reference's order (ties to the lower id)
            assert torch.equal(i_c, _ref_topk(tied, top_k, scoring, renorm)[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_routing_is_captured_in_a_cuda_graph():
    """The whole routing (top-k, align, permute, combine) replays from a CUDA graph with new
    logits written in place, and gives what an eager call on those logits gives."""
    logits = torch.randn(48, 64, device="cuda")
    x = torch.randn(48, 128, device="cuda", dtype=torch.bfloat16)

    def route():
        w, i = moe.topk_route(logits, 6)
        al = moe.moe_align(i, 64, 16)
        return moe.combine(moe.permute(x, al), al, w)

    route()  # warm-up outside the capture (moe_align checks the ids on the host there)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = route()
    logits.copy_(torch.randn(48, 64, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, route())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize(
    "experts,top_k,h,f,tokens,load,fmt",
    [
        (8, 2, 2880, 128, 37, "uniform", "u4g128-sbf16"),  # gpt-oss's hidden size
        (128, 8, 256, 128, 19, "skewed", "u4g128-sbf16-zi"),
        (256, 8, 384, 64, 11, "one", "u4g128-sbf16"),
        (128, 4, 256, 192, 300, "uniform", "u8gc-sbf16"),
    ],
)
def test_quant_moe_on_the_grouped_kernels_at_many_experts_is_right_and_bitwise_stable(
    experts, top_k, h, f, tokens, load, fmt
):
    """A whole MoE layer on the grouped GEMMs (experts packed for sm90) at 8 to 256 experts, loads
    uniform, skewed (most experts empty) and all on one expert: the token-by-token reference holds,
    and a second call gives the same bits (no split of any sum, no atomics in the order)."""
    import humming_aot as ha

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    if not _sm90_instances(f"a-bf16_w-{fmt}_c-bf16"):
        pytest.skip(f"this build has no grouped sm90 instance of {fmt} (a filtered build)")
    w1, w2 = _experts(experts, h, f, experts + h + 1)
    layer = ha.QuantMoE.from_float(w1, w2, fmt, top_k, device="cuda", layout="sm90")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(tokens, h, generator=g).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, generator=g)
    if load == "one":
        logits[:, 3] += 100.0
    elif load == "skewed":
        logits += torch.linspace(8.0, -8.0, experts)
    xd, ld = x.cuda(), logits.cuda()
    first = layer(xd, ld)
    assert torch.equal(layer(xd, ld), first)
    ref = _ref_moe(x.float(), logits, w1, w2, fmt, top_k)
    assert (first.cpu().double() - ref).norm() / ref.norm() <= _MOE_TOL


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_quant_moe_with_biases_and_clamped_swiglu_on_the_grouped_kernels_matches_the_cpu():
    """gpt-oss's expert MLP (clamped SwiGLU, per-expert gate-up and down biases) on the grouped
    GEMMs: the GPU layer (route, the activation with each row's expert's bias found through the
    device offsets) gives the CPU reference layer's output, within the rounding of the GEMMs."""
    import humming_aot as ha

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    experts, top_k, h, f, tokens = 16, 4, 2880, 64, 9
    w1, w2 = _experts(experts, h, f, 41)
    g = torch.Generator().manual_seed(42)
    b1, b2 = torch.randn(experts, 2 * f, generator=g), torch.randn(experts, h, generator=g) * 0.1
    kw = dict(activation="swiglu-oai", gate_up_bias=b1, down_bias=b2, layout="sm90")
    cpu = ha.QuantMoE.from_float(w1, w2, "u4g128-sbf16", top_k, device="cpu", **kw)
    gpu = ha.QuantMoE.from_float(w1, w2, "u4g128-sbf16", top_k, device="cuda", **kw)
    x = torch.randn(tokens, h, generator=g).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, generator=g)
    want = cpu(x, logits).double()
    got = gpu(x.cuda(), logits.cuda()).cpu().double()
    assert (got - want).norm() / want.norm() <= _MOE_TOL


_PDL_SCRIPT = """
import sys, torch
import humming_aot as ha
from humming_aot import moe
g = torch.Generator().manual_seed(7)
e, h, f, k = 64, 512, 256, 6
w1, w2 = torch.randn(e, 2 * f, h, generator=g) * 0.05, torch.randn(e, h, f, generator=g) * 0.05
bias = torch.randn(e, generator=g) * 0.1
layer = ha.QuantMoE.from_float(
    w1, w2, "u4g128-sbf16", k, device="cuda", layout="sm90", scoring="sigmoid", correction_bias=bias,
    n_group=8, topk_group=4, routed_scaling=2.5)
outs = []
for tokens in (1, 9, 130):
    x = torch.randn(tokens, h, generator=g).to(torch.bfloat16).cuda()
    logits = torch.randn(tokens, e, generator=g).cuda()
    eager = layer(x, logits)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replayed = layer(x, logits)
    graph.replay()
    torch.cuda.synchronize()
    outs += [eager.cpu(), replayed.cpu()]
torch.save(outs, sys.argv[1])
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_programmatic_launches_change_no_bit_of_a_moe_layer(tmp_path):
    """HUMMING_PDL (read once per process) only lets launches overlap the kernel before them: a
    whole grouped MoE layer (group-limited routing, align, permute, both GEMMs, the activation,
    combine) gives the same bits with programmatic launches on and off, eagerly and replayed from
    a CUDA graph, in two processes."""
    import os
    import subprocess
    import sys

    from humming_aot import registry

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the grouped GEMM kernels are sm90 ones; this GPU is not sm_90")
    if not _sm90_instances("a-bf16_w-u4g128-sbf16_c-bf16"):
        pytest.skip("this build has no grouped sm90 instance of u4g128-sbf16 (a filtered build)")
    assert registry.instances()  # the package is importable here, so it is in the children too
    script = tmp_path / "layer.py"
    script.write_text(_PDL_SCRIPT)
    results = {}
    for pdl in ("0", "1"):
        out = tmp_path / f"out{pdl}.pt"
        env = dict(os.environ, HUMMING_PDL=pdl)
        done = subprocess.run(
            [sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        results[pdl] = torch.load(out)
    assert len(results["0"]) == len(results["1"]) == 6
    for off, on in zip(results["0"], results["1"]):
        assert torch.equal(off, on)
    assert all(torch.equal(results["1"][i], results["1"][i + 1]) for i in (0, 2, 4))  # graph == eager


GROUP_CASES = [  # experts, n_group, topk_group, top_k, scoring, bias
    (256, 8, 4, 8, "sigmoid", True),  # DeepSeek-V3
    (64, 8, 3, 6, "softmax", False),
    (128, 16, 5, 8, "sigmoid", False),  # groups of 8: several in a lane's 32-expert slot
    (96, 2, 1, 4, "sigmoid", True),  # groups of 48 across slots
    (32, 32, 6, 4, "softmax", True),  # groups of one expert
]


def _group_case(experts, n_group, topk_group, top_k, scoring, bias, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=g)
    b = torch.randn(experts, generator=g) * 0.1 if bias else None
    kw = dict(scoring=scoring, correction_bias=b, n_group=n_group, topk_group=topk_group, scaling=2.5)
    return logits, kw


@pytest.mark.parametrize("experts,n_group,topk_group,top_k,scoring,bias", GROUP_CASES)
def test_group_limited_routing_kernel_matches_the_torch_formula(experts, n_group, topk_group, top_k, scoring, bias):
    """The group-limited choice in the routing op (its CPU reference here) against the same rule in
    torch ops (moe._group_limited, DeepSeek-V3's formula): the same experts in the same order, the
    weights to fp32 rounding (the sums' order may differ), scaled after the renormalization."""
    logits, kw = _group_case(experts, n_group, topk_group, top_k, scoring, bias, 23, experts + n_group)
    w, ids = moe.topk_route(logits, top_k, **kw)
    b = None if kw["correction_bias"] is None else kw["correction_bias"].float()
    rw, rids = moe._group_limited(logits, top_k, scoring, True, b, n_group, topk_group)
    assert torch.equal(ids, rids)
    torch.testing.assert_close(w, rw * 2.5, rtol=2e-6, atol=1e-7)
    # every chosen expert lies in one of the topk_group best groups, which the kernel ranks itself
    size = experts // n_group
    assert all(len({int(e) // size for e in row}) <= topk_group for row in ids)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
@pytest.mark.parametrize("experts,n_group,topk_group,top_k,scoring,bias", GROUP_CASES)
def test_group_limited_routing_on_the_gpu_matches_the_cpu(experts, n_group, topk_group, top_k, scoring, bias):
    """The top-k kernel's group-limited choice (group ranks by shuffles, groups by warp arg-max)
    against the CPU reference: the same experts (the two expf differ in the last bit; these logits
    leave no near ties), the weights to fp32 rounding; eagerly and replayed from a CUDA graph."""
    for tokens in (1, 5, 70):
        logits, kw = _group_case(experts, n_group, topk_group, top_k, scoring, bias, tokens, tokens + experts)
        w_c, i_c = moe.topk_route(logits, top_k, **kw)
        gkw = dict(kw, correction_bias=None if kw["correction_bias"] is None else kw["correction_bias"].cuda())
        lg = logits.cuda()
        w_g, i_g = moe.topk_route(lg, top_k, **gkw)
        assert torch.equal(i_g.cpu(), i_c), tokens
        torch.testing.assert_close(w_g.cpu(), w_c, rtol=2e-6, atol=1e-7)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out_w, out_i = moe.topk_route(lg, top_k, **gkw)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out_i, i_g) and torch.equal(out_w, w_g)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine")
def test_group_limited_routing_past_the_kernel_takes_torch_ops_and_the_op_says_why():
    """More than 256 experts: topk_route's torch path on the GPU (the CPU's answer); the op itself
    refuses with the limits in the message."""
    logits, kw = _group_case(288, 8, 3, 6, "sigmoid", True, 4, 9)
    w_c, i_c = moe.topk_route(logits, 6, **kw)
    w_g, i_g = moe.topk_route(logits.cuda(), 6, **dict(kw, correction_bias=kw["correction_bias"].cuda()))
    assert torch.equal(i_g.cpu(), i_c)
    torch.testing.assert_close(w_g.cpu(), w_c, rtol=2e-6, atol=1e-7)
    with pytest.raises(ValueError, match="up to 256 experts in up to 32 equal groups"):
        torch.ops.humming.moe_topk(logits.cuda(), 6, "sigmoid", True, None, 8, 3, 1.0)


def test_routing_op_refuses_bad_groups():
    """The op's own checks (topk_route checks before it): groups that do not divide the experts,
    topk_group outside [1, n_group], a negative n_group, a scaling that is not finite."""
    logits = torch.randn(3, 32)
    for n_group, topk_group, scaling, want in (
        (5, 2, 1.0, "n_group dividing the 32 experts"),
        (8, 9, 1.0, "topk_group in \\[1, n_group\\]"),
        (-1, 0, 1.0, "n_group must be 0"),
        (0, 0, float("inf"), "scaling must be finite"),
    ):
        with pytest.raises(ValueError, match=want):
            torch.ops.humming.moe_topk(logits, 4, "sigmoid", True, None, n_group, topk_group, scaling)


def test_combine_refuses_positions_outside_the_expert_outputs():
    """A position past the expert outputs' rows (bad input) is an error naming it on the CPU, not
    a read outside the tensor (the GPU adds nothing for such a term)."""
    y = torch.randn(6, 8)
    weights = torch.rand(3, 2)
    with pytest.raises(ValueError, match="position 4 is 6; the expert outputs have 6 rows"):
        torch.ops.humming.moe_combine(y, torch.tensor([0, 1, 2, 3, 6, 5], dtype=torch.int32), weights)
    with pytest.raises(ValueError, match="position 0 is -1"):
        torch.ops.humming.moe_combine(y, torch.tensor([-1, 1, 2, 3, 4, 5], dtype=torch.int32), weights)


def test_group_limited_routing_as_deepseek_v3():
    """DeepSeek-V3's routing (noaux_tc): sigmoid scores, the correction bias for the choice only,
    groups ranked by their two best biased scores, experts of the best topk_group groups only,
    weights renormalized and scaled; against a per-token reference written out here."""
    import math

    g = torch.Generator().manual_seed(3)
    t, e, n_group, topk_group, k, size = 6, 32, 8, 3, 4, 4
    logits = torch.randn(t, e, generator=g)
    logits[0, 0], logits[0, 1] = 6.0, -6.0  # a lone best expert in a group whose pair sums low
    logits[0, 8:16] = 1.5
    bias = torch.randn(e, generator=g) * 0.1
    w, ids = moe.topk_route(
        logits, k, scoring="sigmoid", correction_bias=bias, n_group=n_group, topk_group=topk_group, scaling=2.5
    )
    assert ids.dtype == torch.int32 and w.shape == ids.shape == (t, k)
    for i in range(t):
        s = [1 / (1 + math.exp(-v)) for v in logits[i].tolist()]
        c = [s[j] + float(bias[j]) for j in range(e)]
        pair = [sum(sorted(c[q * size : (q + 1) * size], reverse=True)[:2]) for q in range(n_group)]
        keep = sorted(range(n_group), key=lambda q: -pair[q])[:topk_group]
        chosen = sorted((j for j in range(e) if j // size in keep), key=lambda j: -c[j])[:k]
        assert ids[i].tolist() == chosen, i
        total = sum(s[j] for j in chosen)
        want = torch.tensor([2.5 * s[j] / total for j in chosen])
        assert torch.allclose(w[i], want, rtol=1e-5), i
    assert 0 not in ids[0].tolist()  # the best single expert's group is not among the best three
    with pytest.raises(ValueError, match="n_group must divide the 32 experts"):
        moe.topk_route(logits, k, scoring="sigmoid", n_group=5, topk_group=2)
    with pytest.raises(ValueError, match="topk_group must be from 1 to n_group"):
        moe.topk_route(logits, k, scoring="sigmoid", n_group=8, topk_group=9)
    with pytest.raises(ValueError, match="scaling must be a finite number"):
        moe.topk_route(logits, k, scaling=float("nan"))
    # QuantMoE routes with them too
    layer = moe.QuantMoE.from_float(
        torch.randn(e, 64, 128, generator=g), torch.randn(e, 128, 32, generator=g), "u4g128-sbf16", k,
        scoring="sigmoid", correction_bias=bias, n_group=n_group, topk_group=topk_group, routed_scaling=2.5,
    )  # fmt: skip
    lw, lids, _ = layer._route(torch.randn(t, 128, generator=g).to(torch.bfloat16), logits)
    assert torch.equal(lw, w) and torch.equal(lids, ids)
    with pytest.raises(ValueError, match="n_group must divide"):
        moe.QuantMoE.from_float(
            torch.randn(e, 64, 128), torch.randn(e, 128, 32), "u4g128-sbf16", k, n_group=5, topk_group=1
        )
