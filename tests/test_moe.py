"""MoE routing helpers (humming_aot.moe) against readable references written with Python loops:
top-k selection with both scorings, renormalization and a correction bias; alignment into padded
per-expert blocks for uniform, Zipf-skewed, single-expert and empty-expert loads, token counts whose
assignments fill no whole block, and 8 to 256 experts; the permutation and the weighted combine.
CPU here; the GPU tests at the end run the same on a GPU, inside a CUDA graph."""

from __future__ import annotations

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
