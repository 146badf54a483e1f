"""GPU tests: every compiled instance against the fp64 reference, GPU packing and activation
quantization against the CPU path, dispatch, CUDA graphs and streams, device errors."""

from __future__ import annotations

import functools
import re

import pytest
import torch

import humming_aot as ha
from humming_aot import formats as F
from humming_aot import reference as R
from humming_aot.testing import assert_gemm_close

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is visible on this machine"),
]


def _instances():
    try:
        from humming_aot import registry

        # Dense instances: the grouped (MoE) ones run only grouped GEMMs (tests/test_moe.py).
        return [i for i in registry.instances() if i.scheduler != "moe"]
    except ImportError:  # collected on a machine without the extension: the skip above applies
        return []


def _format_for(inst) -> F.GemmFormat:
    """A concrete GEMM format the instance computes (its key with representative group sizes)."""
    code = F.dtype(inst.code_type)
    if inst.scale_type == "none":
        w = F.WeightFormat(code)
    else:
        scale = F.dtype(inst.scale_type)
        # group_k: -1 = any (generic backend: pick a representative), 0 = per channel, else the group
        gk = inst.group_k if inst.group_k >= 0 else (32 if inst.scale_type == "e8m0" else 128)
        gs = inst.scale_type == "e4m3" and code.is_float  # NVFP4-style two-level scales
        if inst.scale_type == "e4m3" and code.is_float:
            gk = 16
        gn = inst.group_n if inst.group_n > 0 else 1  # block scales (g128n128) name their N group
        w = F.WeightFormat(code, gk, gn, scale, inst.zero, gs)
    act = inst.act_type if inst.act_type in ("bf16", "f16") else f"{inst.act_type}-pt"
    if inst.act_granularity == 2:  # activation scales per token and K group: the weight's group
        act = f"{inst.act_type}-g{inst.group_k}"
    return F.GemmFormat(act, w, inst.out_type)


def _act(fmt: F.GemmFormat, m, k, device, seed):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(device)
    if fmt.act.quantized:
        a, s = ha.quantize_act(x, fmt.act)
        return a, s, R.dequantize_activation(a, s, fmt.act)
    a = x.to(R.torch_dtype(fmt.act.type))
    return a, None, a.float()


INSTANCES = _instances()


def _layout_weight(layout: int, fmt: F.GemmFormat, n: int, k: int, seed: int):
    """A random n x k weight quantized to the format: packed for `layout` on the GPU, and
    dequantized on the CPU for the reference."""
    q = R.quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02, fmt.weight)
    return ha.pack_weight(q, layout=layout).to("cuda"), R.dequantize_weight(q)


def _weight(inst, fmt: F.GemmFormat, n: int, k: int, seed: int):
    """_layout_weight for the instance's layout."""
    return _layout_weight(inst.layout, fmt, n, k, seed)


def _operand(inst, fmt) -> dict:
    """The tolerance's operand term: tensor-core tiles of several mma tiles per warp round
    (code - zero) * group scale to the operand type before the MMA (16-row tiles scale the fp32
    sums instead, which is exact and within the same bound). With float zero points code - z
    rounds as well, also with per-channel scales: two roundings."""
    if inst.backend == "generic" or fmt.act.quantized:  # 8-bit activations: exact products, scales on sums
        return {}
    if fmt.weight.zero == "float":
        return {"operand_dtype": R.torch_dtype(fmt.act.type), "operand_roundings": 2}
    if fmt.weight.group_k == 0:
        return {}
    return {"operand_dtype": R.torch_dtype(fmt.act.type)}


# M values on both sides of every tile height (16, 64, 128), of the narrow kernels (m <= 8) and of
# the dispatch ranges.
M_VALUES = (1, 5, 8, 9, 16, 17, 64, 65, 130)


@pytest.mark.parametrize("inst", INSTANCES, ids=[i.name for i in INSTANCES])
def test_instance_against_reference(inst):
    fmt = _format_for(inst)
    n, k = 264, 4096 + 128  # n needs padding (also past a 256-wide tile); k is not a multiple of 256
    p, w_deq = _weight(inst, fmt, n, k, 1)
    for m in M_VALUES if inst.backend != "generic" else (1, 33, 130):
        a, s, a_deq = _act(fmt, m, k, "cuda", m)
        bias = torch.randn(n, generator=torch.Generator().manual_seed(7)).to("cuda", R.torch_dtype(fmt.out))
        out = ha.gemm(a, p, fmt, a_scales=s, bias=bias, instance=inst.name)
        torch.cuda.synchronize()
        ref = a_deq.double().cpu() @ w_deq.double().T + bias.double().cpu()
        assert_gemm_close(out, ref, a_deq.cpu(), w_deq, f"{inst.name} m={m}", **_operand(inst, fmt))


FAST = [i for i in INSTANCES if i.backend != "generic"]

# sm90 tiles that may store through shared-memory boxes (epilogue/staged_store.h: 64 tokens and
# more, 16-bit outputs); those whose boxes do not fit beside the ring store directly, and are checked
# the same way.
STAGED = [i for i in FAST if i.backend == "sm90" and i.tile[0] >= 64 and i.out_type in ("bf16", "f16")]


@pytest.mark.parametrize("inst", STAGED, ids=[i.name for i in STAGED])
def test_sm90_output_rows_a_tensor_map_cannot_take(inst):
    """An output of 260 16-bit channels has rows of 520 bytes, not a multiple of 16: its boxes
    cannot go out by TMA, so the warpgroups copy them out themselves. Same reference, with the
    tile's partial last rows and channels."""
    fmt = _format_for(inst)
    n, k = 260, 1024 + 128
    p, w_deq = _weight(inst, fmt, n, k, 3)
    for m in (1, 65, 130):
        a, s, a_deq = _act(fmt, m, k, "cuda", m + 100)
        bias = torch.randn(n, generator=torch.Generator().manual_seed(8)).to("cuda", R.torch_dtype(fmt.out))
        out = ha.gemm(a, p, fmt, a_scales=s, bias=bias, instance=inst.name)
        torch.cuda.synchronize()
        ref = a_deq.double().cpu() @ w_deq.double().T + bias.double().cpu()
        assert_gemm_close(out, ref, a_deq.cpu(), w_deq, f"{inst.name} m={m} n={n}", **_operand(inst, fmt))


BLOCK_SCALED = [i for i in FAST if i.backend == "sm90" and i.act_granularity == 2]


@pytest.mark.parametrize("inst", BLOCK_SCALED, ids=[i.name for i in BLOCK_SCALED])
def test_block_scaled_rows_of_scales_a_tensor_map_takes(inst):
    """The block-scaled FP8 kernels at k = 4608: 36 K groups, so that each token's row of
    activation scales ([m][k / 128] fp32) is 16-byte aligned (the test above has k = 4224, 33
    groups), with partial last tiles of rows: the same reference. (A copy of the scales by TMA,
    which needs such rows, is being tried: session 24's note.)"""
    fmt = _format_for(inst)
    n, k = 264, 4096 + 512
    p, w_deq = _weight(inst, fmt, n, k, 4)
    for m in (1, 65, 130, 257):
        a, s, a_deq = _act(fmt, m, k, "cuda", m + 200)
        out = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        torch.cuda.synchronize()
        ref = a_deq.double().cpu() @ w_deq.double().T
        assert_gemm_close(out, ref, a_deq.cpu(), w_deq, f"{inst.name} m={m} k={k}", **_operand(inst, fmt))


def _assert_same_bits_again(first, a, p, fmt, s, inst, reruns: int):
    """Reruns of the GEMM, and one on a second stream, give the bits of `first` (the stream-K
    fix-up adds the partials in block order)."""
    for _ in range(reruns):
        assert torch.equal(ha.gemm(a, p, fmt, a_scales=s, instance=inst.name), first)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        other = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
    torch.cuda.synchronize()
    assert torch.equal(other, first)


# K long enough for stream-K to spread few tiles over many blocks (each keeps at least 2048
# inputs), not a multiple of any tile's K.
SPLIT_K = 14336 + 128


@pytest.mark.parametrize("inst", FAST, ids=[i.name for i in FAST])
def test_split_k_matches_reference_and_is_deterministic(inst):
    """Few rows on a long K spread each tile's K over several blocks (stream-K): the result matches
    the reference, and as the fix-up adds the partials in block order, reruns and a second stream
    give the same bits."""
    from humming_aot import registry

    fmt = _format_for(inst)
    n, k = 264, SPLIT_K
    p, w_deq = _weight(inst, fmt, n, k, 2)
    for m in (1, 17):
        assert registry.workspace_bytes(inst.name, fmt, inst.layout, n, k, m) > 0, "this case must use partials"
        a, s, a_deq = _act(fmt, m, k, "cuda", m)
        first = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        torch.cuda.synchronize()
        ref = a_deq.double().cpu() @ w_deq.double().T
        assert_gemm_close(first, ref, a_deq.cpu(), w_deq, f"{inst.name} m={m} split-K", **_operand(inst, fmt))
        _assert_same_bits_again(first, a, p, fmt, s, inst, reruns=3)


E4M3_INSTANCES = [i for i in FAST if i.code_type == "e4m3"]


@pytest.mark.parametrize("inst", E4M3_INSTANCES, ids=[i.name for i in E4M3_INSTANCES])
def test_e4m3_subnormal_codes(inst):
    """e4m3 weights whose codes are mostly subnormal: each scale group's largest value (column 0,
    code 448) sets the scale and every other value lies below the smallest normal code (2^-6).
    The activations of column 0 are zero, so the output is made of subnormal codes alone: a
    conversion that flushed them would give zeros."""
    fmt = _format_for(inst)
    n, k = 136, 1024 + 64
    g = torch.Generator().manual_seed(12)
    w = (torch.rand(n, k, generator=g) * 2 - 1) * (0.9 * 2.0**-6 / 448)
    step = fmt.weight.group_k or k  # one maximum per scale group
    w[:, ::step] = 1.0
    q = R.quantize_weight(w, fmt.weight)
    codes = q.codes.to(torch.int32)
    subnormal = ((codes & 0x78) == 0) & ((codes & 0x7) != 0)
    assert subnormal.float().mean() > 0.5, "the weight must be mostly subnormal codes"
    p = ha.pack_weight(q, layout=inst.layout).to("cuda")
    w_deq = R.dequantize_weight(q)
    for m in (1, 9, 64):
        a, s, a_deq = _act(fmt, m, k, "cuda", 13)
        # Zeros by their bytes (code 0 is +0 in every 8-bit float too), then the reference's view.
        a.view(torch.uint8 if a.element_size() == 1 else torch.int16)[:, ::step] = 0
        a_deq = (R.dequantize_activation(a, s, fmt.act) if fmt.act.quantized else a.float()).cpu()
        out = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        ref = a_deq.double() @ w_deq.double().T
        assert ref.abs().max() > 0
        assert_gemm_close(out, ref, a_deq, w_deq, f"{inst.name} m={m} subnormal codes", **_operand(inst, fmt))


MXFP4_INSTANCES = [i for i in FAST if i.scale_type == "e8m0"]


@pytest.mark.parametrize("inst", MXFP4_INSTANCES, ids=[i.name for i in MXFP4_INSTANCES])
def test_mxfp4_scale_bytes_far_from_one(inst):
    """MXFP4 weights whose e8m0 group scales are 0x00 (2^-127, a subnormal fp32), 0x7F (1) and 0xBF
    (2^64) in turn along K, each group's sums taking its own power of two: the reference holds
    at the tile heights, the narrow form and a K that ends inside a stage."""
    fmt = _format_for(inst)
    n, k = 136, 1024 + 96  # 35 groups of 32: the last stage holds three
    q = R.quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(14)), fmt.weight)
    b = q.scales.view(torch.uint8)
    b[:, 0::3], b[:, 1::3], b[:, 2::3] = 0x00, 0x7F, 0xBF
    p = ha.pack_weight(q, layout=inst.layout).to("cuda")
    w_deq = R.dequantize_weight(q)
    assert torch.isfinite(w_deq).all() and (w_deq.abs() > 2.0**60).any()
    for m in (1, 9, 64):
        a, s, a_deq = _act(fmt, m, k, "cuda", 15 + m)
        out = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        ref = a_deq.double().cpu() @ w_deq.double().T
        assert_gemm_close(out, ref, a_deq.cpu(), w_deq, f"{inst.name} m={m} e8m0 extremes", **_operand(inst, fmt))


@pytest.mark.parametrize("inst", FAST, ids=[i.name for i in FAST])
def test_global_scale(inst):
    """The instance's format with an fp32 global scale (-gs): the group scales shrink to at most 1
    and the global scale carries the magnitude; narrow, wide and multi-tile row counts."""
    fmt = _format_for(inst)
    w_fmt = F.WeightFormat(
        fmt.weight.code, fmt.weight.group_k, fmt.weight.group_n, fmt.weight.scale, fmt.weight.zero, True
    )
    fmt = F.GemmFormat(fmt.act, w_fmt, fmt.out)
    n, k = 136, 1024 + 64
    q = R.quantize_weight(torch.randn(n, k, generator=torch.Generator().manual_seed(31)) * 3.0, w_fmt)
    assert q.global_scale is not None and float(q.global_scale) != 1.0
    p = ha.pack_weight(q, layout=inst.layout).to("cuda")
    w_deq = R.dequantize_weight(q)
    for m in (1, 9, 64):
        a, s, a_deq = _act(fmt, m, k, "cuda", 32 + m)
        out = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        ref = a_deq.double().cpu() @ w_deq.double().T
        assert_gemm_close(out, ref, a_deq.cpu(), w_deq, f"{inst.name} m={m} global scale", **_operand(inst, fmt))


FLOAT_ZERO_INSTANCES = [i for i in FAST if i.zero == "float"]


@pytest.mark.parametrize("inst", FLOAT_ZERO_INSTANCES, ids=[i.name for i in FLOAT_ZERO_INSTANCES])
def test_float_zero_points_with_positive_activations(inst):
    """Float zero points far from any integer, on weights that are mostly positive (even
    channels) or mostly negative (odd ones), against activations that are all positive: the
    zero-point term z x (sum of the activations) is then as large as the output itself and does
    not cancel across K, so a zero point rounded on the way (for example as magic + z in the
    operand type) or applied to the wrong rows or channels shows. Narrow, wide and multi-tile
    row counts."""
    fmt = _format_for(inst)
    n, k = 200, 4096 + 128
    g = torch.Generator().manual_seed(21)
    w = (torch.rand(n, k, generator=g) * 1.3 - 0.3) * 0.02  # zero points near 15 * 0.3 / 1.3
    w[1::2] = -w[1::2]  # and near 15 - that for 4-bit codes
    q = R.quantize_weight(w, fmt.weight)
    z = R.scale_value(q.zeros, fmt.weight.scale)
    # (bf16 holds only integers from 128 up, so 8-bit codes' zero points near 196 are integers)
    assert ((z - z.round()).abs() > 0.05).float().mean() > 0.3, "zero points must be largely non-integer"
    p = ha.pack_weight(q, layout=inst.layout).to("cuda")
    w_deq = R.dequantize_weight(q)
    for m in (1, 8, 16, 70):
        a = torch.rand(m, k, generator=torch.Generator().manual_seed(m)).to("cuda", R.torch_dtype(fmt.act.type))
        a_deq = a.float().cpu()
        out = ha.gemm(a, p, fmt, instance=inst.name)
        ref = a_deq.double() @ w_deq.double().T
        assert_gemm_close(out, ref, a_deq, w_deq, f"{inst.name} m={m} float zero points", **_operand(inst, fmt))


WAVE_INSTANCES = [i for i in FAST if i.name.startswith("sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t")]


@pytest.mark.parametrize("waves", (1.5, 3.5))
@pytest.mark.parametrize("inst", WAVE_INSTANCES, ids=[i.name for i in WAVE_INSTANCES])
def test_waves_of_tiles_match_reference(inst, waves):
    """Output tiles for 1.5 and 3.5 waves of at most two resident blocks per multiprocessor (plain
    launches: one block per tile, several waves, a partial last tile and a partial last K tile), for
    a narrow and a full row count. Every output matches the reference, reruns give the same bits."""
    fmt = _format_for(inst)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tile_m, tile_n = inst.tile[0], inst.tile[1]
    n = int(waves * 2 * sms) * tile_n - 40  # a partial last tile as well
    k = 640  # not a multiple of 256: the last K tile of each tile is partial
    p, w_deq = _weight(inst, fmt, n, k, 5)
    for m in (3, min(tile_m, 33)):  # 3: the narrow kernels of 16-row tiles
        a, s, a_deq = _act(fmt, m, k, "cuda", 6)
        first = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        ref = a_deq.double().cpu() @ w_deq.double().T
        assert_gemm_close(first, ref, a_deq.cpu(), w_deq, f"{inst.name} n={n} m={m}", **_operand(inst, fmt))
        assert torch.equal(ha.gemm(a, p, fmt, a_scales=s, instance=inst.name), first)


# One format per sm90 kernel path, every tile: bf16 weight-only (symmetric and with zero points),
# W4A8, W8A8 per channel, W8A8 with 128 x 128 blocks, INT8.
RING_FORMATS = (
    r"a-bf16_w-u4(g128-sbf16|g64-sbf16-zi)_c-bf16",
    r"a-e4m3-pt_w-u4g128-sbf16_c-bf16",
    r"a-e4m3-pt_w-e4m3gc-sf32_c-bf16",
    r"a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16",
    r"a-i8-pt_w-i8gc-sbf16_c-bf16",
)
RING_INSTANCES = [i for i in FAST if re.match(rf"sm90_wgmma_dense_({'|'.join(RING_FORMATS)})_t", i.name)]


@functools.lru_cache(maxsize=3)  # the tile widths of one format: 128, 192 and 256
def _ring_weight(layout: int, fmt: F.GemmFormat, n: int, k: int):
    """The ring tests' large weight, made once per layout, format and shape, with its dequantized
    copy also in fp64 on the GPU for the reference."""
    p, w_deq = _layout_weight(layout, fmt, n, k, 8)
    return p, w_deq, w_deq.double().cuda()


@pytest.mark.parametrize("inst", RING_INSTANCES, ids=[i.name for i in RING_INSTANCES])
def test_sm90_rings_wrap_over_waves_of_tiles(inst):
    """Two and a half waves of output tiles (one block per multiprocessor) on a K of 17 stages (34 for
    64-input stages), for two rows of tiles: every block computes two whole tiles and a stream-K
    share of the tail, 42 or more stages through a ring of at most 8, so each stage's barriers go
    through many phases and the producer refills stages the consumers have just released. (The
    other tests' shapes leave most tiles' rings unwrapped: the plans split their K into shares of at
    most 5 stages.) The result matches the reference, and a rerun gives the same bits."""
    fmt = _format_for(inst)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tile_m, tile_n = inst.tile[0], inst.tile[1]
    m, m_tiles = tile_m + 3, 2  # a partial second row of tiles
    n_tiles = -(-5 * sms // (2 * m_tiles))
    n, k = n_tiles * tile_n - 40, 2048 + 128  # a partial last tile; 17 stages of 128 inputs
    assert m_tiles * n_tiles >= 2 * sms, "the launch must have two whole waves of tiles"
    p, w_deq, w_ref = _ring_weight(inst.layout, fmt, n, k)
    a, s, a_deq = _act(fmt, m, k, "cuda", 9)
    first = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
    ref = (a_deq.double() @ w_ref.T).cpu()  # fp64 on the GPU: the CPU would take seconds
    assert_gemm_close(first, ref, a_deq.cpu(), w_deq, f"{inst.name} n={n} m={m}", **_operand(inst, fmt))
    assert torch.equal(ha.gemm(a, p, fmt, a_scales=s, instance=inst.name), first)


# sm90 tiles of 128 tokens whose launches of at most half as many tiles as multiprocessors with
# K >= 4096 spread over K (scheduler/streamk.h, HeavySpread): the weight-only ones and those with
# 4-bit codes on FP8 tensor cores (W4A8); one row of tiles (m = 100) and two (m = 200).
HEAVY_INSTANCES = [
    i
    for i in FAST
    if i.backend == "sm90"
    and i.scheduler == "dense"
    and i.tile[0] == 128
    and (i.act_type in ("bf16", "f16") or (i.act_type in ("e4m3", "e5m2") and F.dtype(i.code_type).bits == 4))
]


@pytest.mark.parametrize("inst", HEAVY_INSTANCES, ids=[i.name for i in HEAVY_INSTANCES])
def test_sm90_heavy_tiles_spread_over_k(inst):
    """A few 128-token tiles over a deep K take partials from several blocks each; the result
    matches the reference and reruns and a second stream give the same bits."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # A quarter of the SMs' tiles per row (half in two rows); a partial last tile.
    _check_split_launches(inst, (sms // 4) * inst.tile[1] - 40, 4096 + 128, (100, 200), seed=10, reruns=2)


def _check_split_launches(inst, n: int, k: int, ms, seed: int, reruns: int):
    """Instance `inst` on the ring tests' n x k weight at each m of `ms`, each launch taking
    partials: the result matches the fp64 reference, and `reruns` reruns give the same bits."""
    from humming_aot import registry

    fmt = _format_for(inst)
    p, w_deq, w_ref = _ring_weight(inst.layout, fmt, n, k)
    for m in ms:
        assert registry.workspace_bytes(inst.name, fmt, inst.layout, n, k, m) > 0, "this case must use partials"
        a, s, a_deq = _act(fmt, m, k, "cuda", seed)
        first = ha.gemm(a, p, fmt, a_scales=s, instance=inst.name)
        ref = (a_deq.double() @ w_ref.T).cpu()
        assert_gemm_close(first, ref, a_deq.cpu(), w_deq, f"{inst.name} n={n} m={m}", **_operand(inst, fmt))
        _assert_same_bits_again(first, a, p, fmt, s, inst, reruns=reruns)


# sm90 tiles of 32 and 64 tokens in launches of more tiles than half the multiprocessors over a
# K beyond 8192: each tile's K is spread unevenly over the blocks, with the rows of tiles walking
# in step (the default; scheduler/streamk.h, StreamKPlan::step_rows: row-major tiles, a whole
# number of blocks a row) and in grouped order (HUMMING_LOCKSTEP_ROWS=0); two rows
# (m = 2 BM - 10) and three (m = 3 BM - 5), a partial last column. (tests/cpp/test_core.cpp checks
# that such plans walk in step.)
STEP_INSTANCES = [i for i in FAST if i.backend == "sm90" and i.scheduler == "dense" and i.tile[0] in (32, 64)]


@pytest.mark.parametrize("lockstep", ["0", "1"])
@pytest.mark.parametrize("inst", STEP_INSTANCES, ids=[i.name for i in STEP_INSTANCES])
def test_sm90_rows_walk_in_step(inst, lockstep, monkeypatch):
    """Several rows of mid tiles spread unevenly over K, in either order: the result matches the
    reference and reruns give the same bits."""
    monkeypatch.setenv("HUMMING_LOCKSTEP_ROWS", lockstep)  # read at each launch's plan
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # More than half as many tiles as multiprocessors in two rows, fewer than all in three. (Two
    # rows of W8A8 t64 tiles keep whole tiles there: scheduler/streamk.h, MidSpread::kDeep.)
    n, k = (sms // 4 + 1) * inst.tile[1] - 40, 8192 + 128
    two_whole = inst.tile[0] == 64 and F.dtype(inst.act_type).bits == 8 and F.dtype(inst.code_type).bits == 8
    ms = (3 * inst.tile[0] - 5,) if two_whole else (2 * inst.tile[0] - 10, 3 * inst.tile[0] - 5)
    _check_split_launches(inst, n, k, ms, seed=11, reruns=1)


def test_dispatch_crosses_ranges_with_fast_instances():
    """The default layout for a format with fast instances is that of a fast backend (sm90 first
    where the device's table says so and the build has sm90 instances for the format, else sm80),
    and every M range picks an instance of that backend; results match the reference across the
    boundaries."""
    if not FAST:
        pytest.skip("this build has no fast instances (profile without the sm80 or sm90 backend)")
    from humming_aot import dispatch, registry

    lin = torch.nn.Linear(2048, 512)
    layer = ha.QuantLinear.from_linear(lin, "u4g128-sbf16", device="cuda")
    props = torch.cuda.get_device_properties(0)
    table = dispatch._table_for(props.major * 10 + props.minor, props.multi_processor_count, props.name)
    has = {
        lay: any(
            i.layout == lid
            and "u4g128-sbf16" in i.name
            and i.act_type == "bf16"
            and registry.runs_on(i.name, props.major * 10 + props.minor)[0]
            for i in FAST
        )
        for lay, lid in (("sm80", 2), ("sm90", 3))
    }
    # (The table also names layouts of other formats, such as sm90a8 for 8-bit activations.)
    expected = next((lay for lay in table.get("layouts", []) + ["sm80", "sm90"] if has.get(lay)), None)
    if expected is None:
        pytest.skip("this build has no dense sm80 or sm90 u4g128-sbf16 instance that runs on this GPU")
    assert layer.layout == {"sm80": 2, "sm90": 3}[expected]
    q = R.quantize_weight(lin.weight.detach(), "u4g128-sbf16")
    w = R.dequantize_weight(q)
    for m in M_VALUES:
        x = torch.randn(m, 2048, device="cuda", dtype=torch.bfloat16)
        name = layer.instance_for(m, "cuda")
        assert name.startswith(expected + "_"), name
        y = layer(x)
        ref = x.cpu().double() @ w.double().T + lin.bias.detach().to(torch.bfloat16).double()
        assert_gemm_close(y, ref, x.cpu().float(), w, f"{name} m={m}", torch.bfloat16)


def test_large_m_default_choices_match_reference():
    """Past 16 rows of tiles the estimates choose among the weight-only tiles of 128 tokens and more
    (registry.cpp estimate_max_tile_rows, session 64), the dense two-block t176x256x64 among them
    (the only two-block tile the table costs): the layers the dispatcher's choices run at such M match
    the reference (n not a multiple of the tiles' 256 channels), and a build that has t176x256x64
    takes it at one of them at least where this device's table has its cost (the H200 table, which
    132-SM Hopper GPUs take), as those costs say it should on this shape."""
    from humming_aot import dispatch

    def layer_table():
        props = torch.cuda.get_device_properties(0)
        return dispatch._table_for(props.major * 10 + props.minor, props.multi_processor_count, props.name)

    fmt = "u4g128-sbf16"
    tall = [
        i
        for i in FAST
        if i.layout == 3 and i.scheduler == "dense" and i.tile[0] >= 128 and f"_w-{fmt}_c-bf16_" in i.name
    ]
    if not tall or torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("this build or GPU has no sm90 dense u4g128-sbf16 tile of 128 tokens or more")
    lin = torch.nn.Linear(1408, 1280, bias=False)
    layer = ha.QuantLinear.from_linear(lin, fmt, device="cuda", layout="sm90")
    w = R.dequantize_weight(R.quantize_weight(lin.weight.detach(), fmt))
    chosen = []
    for m in (2100, 4500):
        x = torch.randn(m, 1408, device="cuda", dtype=torch.bfloat16)
        name = layer.instance_for(m, "cuda")
        chosen.append(name)
        ref = x.cpu().double() @ w.double().T
        assert_gemm_close(layer(x), ref, x.cpu().float(), w, f"{name} m={m}", torch.bfloat16)
    costed = dispatch._tile_costs(layer_table())
    if any(tuple(i.tile) == (176, 256, 64) and dispatch._cost_for(costed, i) is not None for i in tall):
        assert any("_t176x256x64_" in n for n in chosen), chosen


A8_INSTANCES = [i for i in FAST if i.act_type in ("e4m3", "e5m2", "i8")]


@pytest.mark.parametrize(
    "wfmt,act",
    [
        ("e4m3gc-sf32", "e4m3-pt"),
        ("e4m3g128n128-sf32", "e4m3-g128"),
        ("i8gc-sf32", "i8-pt"),
        ("u4gc-sbf16", "e4m3-pt"),
        ("u4g128-sbf16", "e4m3-pt"),
        ("e2m1gc-sbf16", "e4m3-pt"),
        ("i4gc-sbf16", "i8-pt"),
    ],
    ids=["fp8-per-channel", "fp8-blocks", "int8", "w4a8-u4", "w4a8-u4-g128", "w4a8-fp4", "w4a8-int8"],
)
def test_w8a8_layer_runs_on_the_fp8_kernels(wfmt, act):
    """A W8A8 layer (e4m3 activations per token, or per token and 128 inputs, with e4m3 weights with
    per-channel scales or DeepSeek's 128 x 128 blocks; i8 x i8 per token and channel), or a W4A8
    one (u4, e2m1 or i4 weights with e4m3 or i8 activations), packs for the generic layout, which
    the sm90 8-bit activation kernels read as it is, or W4A8 for layout 4; on the H200 every M range picks one of them
    (not the generic backend), including in a CUDA graph, and matches the reference across the
    tile heights."""
    if not A8_INSTANCES:
        pytest.skip(
            "this build has no 8-bit activation tensor-core instances (an sm_90a build of the dev or full profile has them)"
        )
    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    if not any(i.name.startswith("sm90_") and f"_{fmt}_" in i.name for i in A8_INSTANCES):
        pytest.skip(f"this build has no FP8 instance for {fmt}")
    lin = torch.nn.Linear(3072 + 64, 520, bias=True)  # 520: a partial last tile; K: a partial last group
    layer = ha.QuantLinear.from_linear(lin, wfmt, act, device="cuda")
    # 4-bit codes pack for layout 4 (sm90a8) where this build has such an instance for the format;
    # everything else in the generic layout, which the kernels read as it is.
    l4 = any(i.layout == 4 and f"_{fmt}_" in i.name for i in A8_INSTANCES)
    assert layer.layout == (4 if l4 else 1)
    q = R.quantize_weight(lin.weight.detach(), wfmt)
    w = R.dequantize_weight(q)
    bias = lin.bias.detach().to(torch.bfloat16).double()
    for m in M_VALUES + (300,):
        x = torch.randn(m, lin.in_features, generator=torch.Generator().manual_seed(m)).to("cuda", torch.bfloat16)
        name = layer.instance_for(m, "cuda")
        assert name.startswith(f"sm90_wgmma_dense_a-{act}_"), name
        a, s = ha.quantize_act(x, act)
        a_deq = R.dequantize_activation(a, s, F.parse_activation_format(act)).cpu()
        y = layer(x)
        ref = a_deq.double() @ w.double().T + bias
        assert_gemm_close(y, ref, a_deq, w, f"{name} m={m}")
    x = torch.randn(16, lin.in_features, device="cuda", dtype=torch.bfloat16)
    eager = layer(x)
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer(x)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        out = layer(x)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


SM80_A8 = [i for i in A8_INSTANCES if i.backend == "sm80"]


@pytest.mark.parametrize(
    "wfmt,act",
    [
        ("e4m3gc-sf32", "e4m3-pt"),
        ("e4m3g128n128-sf32", "e4m3-g128"),
        ("i8gc-sf32", "i8-pt"),
        ("u4g128-sbf16", "e4m3-pt"),
        ("e2m1g32-se8m0", "e4m3-pt"),
        ("i4gc-sbf16", "i8-pt"),
    ],
    ids=["fp8-per-channel", "fp8-blocks", "int8", "w4a8-u4-g128", "w4a8-mxfp4", "w4a8-int8"],
)
def test_sm89_dispatch_picks_the_sm80_8bit_kernels_and_they_match(wfmt, act):
    """On an sm_89 GPU (L40S: 142 multiprocessors, described to the dispatcher; a build for sm_89
    and this GPU, whose kernels run here as this GPU's code) every M range of a W8A8 / W4A8 format picks one of the sm80 family's
    8-bit activation instances, never the generic backend, and the instance it picks matches the
    reference on this GPU across the tile heights (the narrow form up to 8 rows, stream-K)."""
    from humming_aot import dispatch

    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    if not any(f"_{fmt}_" in i.name and "89" in i.archs for i in SM80_A8):
        pytest.skip(
            f"this build has no sm80 8-bit activation instance for {fmt} with sm_89 code (a dev+experimental build "
            "with HUMMING_CUDA_ARCHS=89;90a has them)"
        )
    n, k = 520, 3072 + 64  # a partial last tile; K not a whole number of 128-input stages
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(4)) * 0.02
    q = R.quantize_weight(w, wfmt)
    p = ha.pack_weight(q, layout=1).to("cuda")
    w_deq = R.dequantize_weight(q)
    g = F.parse_gemm_format(fmt)
    for m in M_VALUES + (300,):
        name = dispatch.choose_for(fmt, n, k, m, cc=89, sms=142)
        assert name.startswith("sm80_mma_dense_a-"), (m, name)
        a, s, a_deq = _act(g, m, k, "cuda", m)
        out = ha.gemm(a, p, g, a_scales=s, instance=name)
        ref = a_deq.double().cpu() @ w_deq.double().T
        assert_gemm_close(out, ref, a_deq.cpu(), w_deq, f"{name} m={m}")


@pytest.mark.parametrize(
    "wfmt,act", [("u4g128-sbf16", "e4m3-pt"), ("e2m1gc-sbf16", "e4m3-pt"), ("u4gc-sbf16", "i8-pt")]
)
def test_w4a8_weight_in_the_generic_layout_still_runs_on_the_fp8_kernels(wfmt, act):
    """A W4A8 weight packed for the generic layout (layout 4 is the sm90 default) is not left to
    the generic backend: every M range picks an sm90 8-bit activation instance that reads it, and
    the result matches the reference."""
    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    if not any(i.layout == 1 and f"_{fmt}_" in i.name for i in A8_INSTANCES):
        pytest.skip(f"this build has no sm90 instance for {fmt} in the generic layout")
    lin = torch.nn.Linear(2048, 384, bias=False)
    layer = ha.QuantLinear.from_linear(lin, wfmt, act, device="cuda", layout="generic")
    assert layer.layout == 1
    w = R.dequantize_weight(R.quantize_weight(lin.weight.detach(), wfmt))
    for m in (1, 40, 300, 2500):
        x = torch.randn(m, 2048, generator=torch.Generator().manual_seed(m)).to("cuda", torch.bfloat16)
        name = layer.instance_for(m, "cuda")
        assert name.startswith(f"sm90_wgmma_dense_a-{act}_") and not name.endswith("_l4"), name
        a, s = ha.quantize_act(x, act)
        a_deq = R.dequantize_activation(a, s, F.parse_activation_format(act)).cpu()
        assert_gemm_close(layer(x), a_deq.double() @ w.double().T, a_deq, w, f"{name} m={m}")


@pytest.mark.parametrize(
    "wfmt,act", [("e2m1gc-sbf16", "e4m3-pt"), ("u4g128-sbf16", "e4m3-pt"), ("e4m3gc-sf32", "e4m3-pt")]
)
def test_quantize_and_gemm_reads_the_latest_weight_and_activations(wfmt, act):
    """QuantLinear's quantize-and-GEMM call lets the sm90 GEMM copy its first stages' weights
    before it waits for the quantize kernel (GemmArgs::early_weights), and that kernel waits for the
    launches before it. Back-to-back calls with no synchronization, each right after the layer's
    weight was overwritten in place with one of two weights and with fresh activations, give bit
    for bit what the separate quantize_act and gemm ops give for that weight and those activations
    (and the two weights' results differ, so a stale weight or stale codes would show)."""
    fmt = f"a-{act}_w-{wfmt}_c-bf16"
    if not any(i.name.startswith("sm90_wgmma_dense_") and f"_{fmt}_" in i.name for i in A8_INSTANCES):
        pytest.skip(f"this build has no sm90 8-bit activation instance for {fmt}")
    n, k = 4096, 4096
    lins = [torch.nn.Linear(k, n, bias=False) for _ in range(2)]
    for i, lin in enumerate(lins):
        torch.nn.init.normal_(lin.weight, std=0.02, generator=torch.Generator().manual_seed(10 + i))
    sources = [ha.QuantLinear.from_linear(lin, wfmt, act, device="cuda") for lin in lins]
    layer = ha.QuantLinear.from_linear(lins[0], wfmt, act, device="cuda")
    ms = (1, 16, 1, 64, 256, 1, 8, 16)
    xs = [
        torch.randn(m, k, generator=torch.Generator().manual_seed(100 + i)).to("cuda", torch.bfloat16)
        for i, m in enumerate(ms)
    ]
    names = [b for b in ("codes", "scales", "zeros", "global_scale") if layer._buffers.get(b) is not None]

    def separate(src, x):
        a, s = torch.ops.humming.quantize_act(x, src._act_str)
        b = src._buffers
        return torch.ops.humming.gemm(
            a,
            b["codes"],
            b["scales"],
            b["zeros"],
            b["global_scale"],
            s,
            b["bias"],
            src._fmt_str,
            src.layout,
            n,
            k,
            layer.instance_for(x.shape[0], "cuda"),
        )

    expected = [separate(sources[i % 2], x) for i, x in enumerate(xs)]
    other = [separate(sources[(i + 1) % 2], x) for i, x in enumerate(xs)]
    outs = []
    for i, x in enumerate(xs):
        for b in names:
            layer._buffers[b].copy_(sources[i % 2]._buffers[b])
        outs.append(layer(x))
    torch.cuda.synchronize()
    for i, m in enumerate(ms):
        assert not torch.equal(expected[i], other[i]), f"m={m}: the two weights give the same output"
        assert torch.equal(outs[i], expected[i]), f"call {i} (m={m}, {layer.instance_for(m, 'cuda')})"


_PACK_CASES = [
    (fmt, lay)
    for fmt in ["u4g128-sbf16-zi", "u3g32-sbf16", "e2m1g16-se4m3-gs", "i8gc-sf32", "u7g64-sf16-zf"]
    for lay, bits in (("generic", (1, 2, 3, 4, 5, 6, 7, 8)), ("sm80", (4, 8)), ("sm90", (4, 8)), ("sm90a8", (4,)))
    if F.parse_weight_format(fmt).code.bits in bits
]


@pytest.mark.parametrize("fmt,layout", _PACK_CASES)
def test_gpu_pack_equals_cpu_pack(fmt, layout):
    q = R.quantize_weight(torch.randn(100, 300) * 0.1, fmt)
    cpu = ha.pack_weight(q, layout=layout)
    qg = R.QuantizedWeight(
        q.fmt,
        q.codes.cuda(),
        None if q.scales is None else q.scales.cuda(),
        None if q.zeros is None else q.zeros.cuda(),
        None if q.global_scale is None else q.global_scale.cuda(),
    )
    gpu = ha.pack_weight(qg, layout=layout)
    assert gpu.codes.is_cuda and gpu.layout == cpu.layout
    assert torch.equal(gpu.codes.cpu(), cpu.codes)
    assert torch.equal(gpu.scales.cpu().view(torch.uint8), cpu.scales.view(torch.uint8))
    back = ha.unpack_weight(gpu)
    assert torch.equal(back.codes.cpu(), q.codes)


# (rows, k, stride): the vector kernels' rows of whole 16-byte units, one long decode row, a row
# stride wider than k, k = 1000 - 4 (not a multiple of 8: the scalar kernel), and rows of 17408
# inputs (blocks of 544 threads, which stream rows) more than the H200 holds such blocks at once
# (132 SMs x 3), so that blocks take several rows each and prefetch the next.
QUANT_SHAPES = [(37, 1000, 1000), (1, 28672, 28672), (5, 512, 640), (3, 996, 996), (600, 17408, 17416)]


@pytest.mark.parametrize(
    "act", ["e4m3-pt", "e4m3-g128", "e4m3-g32", "e4m3-g8", "e5m2-pt", "e5m2-g64", "i8-pt", "i8-g16"]
)
@pytest.mark.parametrize("shape", QUANT_SHAPES, ids=[f"{m}x{k}s{ld}" for m, k, ld in QUANT_SHAPES])
def test_gpu_quantize_act_equals_cpu(act, shape):
    """Bit for bit against the CPU path, which the reference's rule defines, for every input type,
    with groups cut by the row's end, and with values spread from subnormal codes to the clip."""
    m, k, ld = shape
    g = torch.Generator().manual_seed(k + m)
    x = torch.randn(m, ld, generator=g) * torch.exp2(torch.randint(-12, 12, (m, ld), generator=g).float())
    x[:, :16] = 0.0  # an all-zero group (scale 1)
    x[0, 40] = -0.0
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        xs = x.to(dt)
        c_cpu, s_cpu = ha.quantize_act(xs[:, :k].contiguous(), act)
        c_gpu, s_gpu = ha.quantize_act(xs.cuda()[:, :k], act)  # row stride ld on the GPU
        assert torch.equal(s_gpu.cpu(), s_cpu), f"{act} {dt} scales"
        assert torch.equal(c_gpu.cpu().view(torch.uint8), c_cpu.view(torch.uint8)), f"{act} {dt} codes"


# Rows for the reciprocal quotients of the vector kernels: (rows, k): a warp per row of 768 and
# of 2048 inputs (more than 256 rows), a block per row of 8192 inputs.
RECIPROCAL_SHAPES = [(600, 768), (520, 2048), (40, 8192)]


@pytest.mark.parametrize("act", ["e4m3-pt", "e5m2-pt", "i8-pt", "e4m3-g128", "e5m2-g16"])
@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("shape", RECIPROCAL_SHAPES, ids=[f"{m}x{k}" for m, k in RECIPROCAL_SHAPES])
def test_gpu_quantize_act_quotients_round_as_the_division(act, dt, shape):
    """The vector kernels divide by the scale through its reciprocal where that rounds as the
    division does (scales in [2^-60, 2^60]) and divide outside: bit for bit against the CPU path's
    division, on rows whose largest magnitudes have random significands over binades 2^-70 to 2^15
    (so scales on both sides of the bounds), filled with values of every significand from 24 binades
    below that maximum up to it (the inputs whose quotients reach a nonzero code), of both signs,
    with exact zeros of both signs."""
    m, k = shape
    mant = 7 if dt == torch.bfloat16 else 10
    g = torch.Generator().manual_seed(m + k + mant)
    # Positive finite values of a 16-bit float type are ordered as their bit patterns.
    lo_exp, hi_exp = (-70, 16) if dt == torch.bfloat16 else (-24, 15)  # (f16's largest binade is 2^15)
    top = torch.ldexp(1.0 + torch.rand(m, generator=g), torch.randint(lo_exp, hi_exp, (m,), generator=g)).to(dt)
    top_bits = top.view(torch.int16).to(torch.int64)
    low = (top_bits - 24 * 2**mant).clamp(min=0)
    span = top_bits - low + 1
    mag = low[:, None] + (torch.rand(m, k, generator=g, dtype=torch.float64) * span[:, None]).long()
    sign = torch.randint(0, 2, (m, k), generator=g, dtype=torch.int64) << 15
    x = (mag | sign).to(torch.int32).to(torch.int16).view(dt)
    x[:, 0] = top  # the row's largest magnitude, exactly
    x[:, 1], x[:, 2] = 0.0, -0.0
    c_cpu, s_cpu = ha.quantize_act(x, act)
    c_gpu, s_gpu = ha.quantize_act(x.cuda(), act)
    assert torch.equal(s_gpu.cpu(), s_cpu), f"{act} scales"
    bad = (c_gpu.cpu().view(torch.uint8) != c_cpu.view(torch.uint8)).nonzero()
    assert bad.numel() == 0, f"{act}: {bad.shape[0]} codes differ, first at {bad[0].tolist()}: x = {x[tuple(bad[0])]}"


def test_quant_linear_dispatch_and_explain():
    from humming_aot import dispatch

    g = F.parse_gemm_format("a-bf16_w-u4g128-sbf16_c-bf16")
    if not any(i.layout == 1 and dispatch._computes(i, g) for i in INSTANCES):
        # (A build filtered with HUMMING_FILTER, e.g. by scripts/gpu_flags_ab.sh.)
        pytest.skip("this build has no instance that reads u4g128-sbf16 in the generic layout")
    lin = torch.nn.Linear(512, 384)
    layer = ha.QuantLinear.from_linear(lin, "u4g128-sbf16", device="cuda", layout="generic")
    x = torch.randn(3, 5, 512, device="cuda", dtype=torch.bfloat16)
    y = layer(x)
    assert y.shape == (3, 5, 384) and y.is_cuda
    name = layer.instance_for(15, "cuda")
    text = ha.explain(layer.fmt, 384, 512, 15)
    assert f"choice: {name}" in text
    y_cpu = layer.to("cpu")(x.cpu())
    q = R.quantize_weight(lin.weight.detach(), "u4g128-sbf16")
    w = R.dequantize_weight(q)
    ref = x.cpu().reshape(-1, 512).double() @ w.double().T + lin.bias.detach().to(torch.bfloat16).double()
    assert_gemm_close(y.reshape(-1, 384), ref, x.cpu().reshape(-1, 512).float(), w, "gpu layer")
    assert_gemm_close(y_cpu.reshape(-1, 384), ref, x.cpu().reshape(-1, 512).float(), w, "cpu layer")


def test_cuda_graph_and_streams():
    from humming_aot import registry

    # A long K on few tiles, so that the sm80 instance uses stream-K: graphs and streams cover its scratch.
    layer = ha.QuantLinear.from_linear(torch.nn.Linear(SPLIT_K, 512), "u4g128-sbf16", device="cuda")
    x = torch.randn(8, SPLIT_K, device="cuda", dtype=torch.bfloat16)
    name = layer.instance_for(8, "cuda")
    if name.startswith("sm80_"):
        assert registry.workspace_bytes(name, layer.fmt, layer.layout, 512, SPLIT_K, 8) > 0
    eager = layer(x)
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        layer(static_x)  # warm the dispatch cache outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, eager)
    # two streams at once give the same bits as the default stream
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    x2 = torch.randn(8, SPLIT_K, device="cuda", dtype=torch.bfloat16)
    ref2 = layer(x2)
    torch.cuda.synchronize()
    with torch.cuda.stream(s1):
        y1 = layer(x)
    with torch.cuda.stream(s2):
        y2 = layer(x2)
    torch.cuda.synchronize()
    assert torch.equal(y1, eager) and torch.equal(y2, ref2)


@pytest.mark.parametrize("owned,max_mib", [("0", None), ("1", None), ("1", "0")])
def test_graphs_keep_their_stream_k_scratch_through_replays_and_deletion(owned, max_mib, monkeypatch):
    """Under capture, a graph's stream-K GEMMs of decode-sized scratch (these: at most 17 MiB) share a
    buffer of the graph's own, zeroed once while the capture runs and freed after the graph is gone
    (HUMMING_GRAPH_SCRATCH=1, the default), or take scratch from the graph's pool, zeroed by a fill
    the graph replays (0, or 1 with HUMMING_GRAPH_SCRATCH_MAX_MIB=0: no scratch is small enough for
    the graph's own). Either way, two graphs of two GEMMs each, replayed in turn with fresh inputs
    between eager calls of the same layers, give the eager bits every time (the tile counters are
    back at zero after each replay); deleting one graph changes nothing for the other, for eager
    calls (which free the deleted graph's buffer) or for a new capture."""
    import gc

    from humming_aot import registry

    monkeypatch.setenv("HUMMING_GRAPH_SCRATCH", owned)
    if max_mib is not None:
        monkeypatch.setenv("HUMMING_GRAPH_SCRATCH_MAX_MIB", max_mib)

    ns, ms = (512, 1024), (1, 8)
    layers = [ha.QuantLinear.from_linear(torch.nn.Linear(SPLIT_K, n), "u4g128-sbf16", device="cuda") for n in ns]
    split = [
        (n, m)
        for n, layer in zip(ns, layers)
        for m in ms
        if registry.workspace_bytes(layer.instance_for(m, "cuda"), layer.fmt, layer.layout, n, SPLIT_K, m) > 0
    ]
    if not split:
        pytest.skip("no instance of this build splits K on these shapes: nothing takes stream-K scratch")
    gen = torch.Generator(device="cuda").manual_seed(3)

    def fresh(m):
        return torch.randn(m, SPLIT_K, device="cuda", dtype=torch.bfloat16, generator=gen)

    def capture(layer):
        static = {m: fresh(m) for m in ms}
        for m in ms:
            layer(static[m])  # the dispatch cache warmed outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ys = {m: layer(static[m]) for m in ms}
        return graph, static, ys

    def check(i, graph, static, ys):
        for m in ms:
            static[m].copy_(fresh(m))
        graph.replay()
        eager = {m: layers[i](static[m]) for m in ms}
        torch.cuda.synchronize()
        for m in ms:
            assert torch.equal(ys[m], eager[m]), (ns[i], m, layers[i].instance_for(m, "cuda"))

    captured = [capture(layer) for layer in layers]
    for _ in range(3):
        for i in range(2):
            check(i, *captured[i])
    del captured[0]
    gc.collect()
    torch.cuda.synchronize()
    check(1, *captured[0])
    captured.append(capture(layers[0]))
    for _ in range(2):
        check(0, *captured[1])
        check(1, *captured[0])


def test_graph_scratch_limit_setting_is_checked(monkeypatch):
    """A HUMMING_GRAPH_SCRATCH_MAX_MIB that is not a whole number of MiB from 0 to 1024 stops the
    capture of a GEMM that takes stream-K scratch with an error naming the setting."""
    from humming_aot import registry

    layer = ha.QuantLinear.from_linear(torch.nn.Linear(SPLIT_K, 512), "u4g128-sbf16", device="cuda")
    x = torch.randn(1, SPLIT_K, device="cuda", dtype=torch.bfloat16)
    if registry.workspace_bytes(layer.instance_for(1, "cuda"), layer.fmt, layer.layout, 512, SPLIT_K, 1) == 0:
        pytest.skip("this build's instance for the layer does not split K: nothing takes stream-K scratch")
    layer(x)
    torch.cuda.synchronize()
    for bad in ("16.5", "-1", "2048", "lots"):
        monkeypatch.setenv("HUMMING_GRAPH_SCRATCH_MAX_MIB", bad)
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(ValueError, match="HUMMING_GRAPH_SCRATCH_MAX_MIB"):
            with torch.cuda.graph(graph):
                layer(x)
        del graph
        torch.cuda.synchronize()


def test_gpu_error_paths():
    q = R.quantize_weight(torch.randn(64, 128) * 0.1, "u4g64-sbf16")
    p = ha.pack_weight(q)  # on the CPU
    x = torch.randn(2, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="same device"):
        torch.ops.humming.gemm(
            x, p.codes, p.scales, None, None, None, None, "a-bf16_w-u4g64-sbf16_c-bf16", 1, 64, 128, ""
        )
    pg = p.to("cuda")
    other = next((i.name for i in INSTANCES if i.code_type != "u4"), None)
    if other is not None:
        with pytest.raises(ValueError, match="does not compute"):
            torch.ops.humming.gemm(
                x, pg.codes, pg.scales, None, None, None, None, "a-bf16_w-u4g64-sbf16_c-bf16", 1, 64, 128, other
            )
    # the weight fits, but no instance of this build writes f16 from bf16 activations
    assert not any(i.act_type == "bf16" and i.out_type == "f16" and i.code_type == "u4" for i in INSTANCES)
    with pytest.raises(ValueError, match="no compiled instance computes"):
        torch.ops.humming.gemm(
            x, pg.codes, pg.scales, None, None, None, None, "a-bf16_w-u4g64-sbf16_c-f16", 1, 64, 128, ""
        )
    with pytest.raises(ValueError, match="packed codes has shape"):  # packed for 4-bit codes, read as 6-bit
        torch.ops.humming.gemm(
            x, pg.codes, pg.scales, None, None, None, None, "a-bf16_w-u6g64-sbf16_c-bf16", 1, 64, 128, ""
        )
