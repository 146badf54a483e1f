"""Mixture-of-experts routing helpers: top-k selection, alignment of token-to-expert assignments
into per-expert blocks, and the permutations around the experts' GEMMs.

``QuantMoE`` puts them together with the experts' GEMMs. Each helper is a torch op
(``torch.ops.humming.moe_topk``, ``moe_align``, ``moe_permute``, ``moe_combine``, and the experts'
activation ``moe_activation``) with a CPU reference and a CUDA kernel (src/moe_route_cpu.cpp,
src/moe_route.cu): static output shapes and no host synchronization, so they can be captured in
CUDA graphs (a graph captures the worst-case sizes; the real extents are device tensors).
Deterministic: ties go to the lower expert id, and the assignments of one expert keep token order;
the CPU and the GPU give the same experts, rows and combined outputs (bitwise), and top-k weights
and activations equal to fp32 rounding.

Vocabulary: T tokens, E experts, ``top_k`` experts per token, A = T x top_k assignments numbered
``t * top_k + j`` (token t's j-th choice).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator

import torch

from . import ops as _ops  # loads the extension: torch.ops.humming.moe_* and their fakes

SCORINGS = ("softmax", "sigmoid")
# The experts' activations between their two GEMMs: "silu", silu(gate) * up (Mixtral, Qwen-MoE,
# DeepSeek); "swiglu-oai", gpt-oss's clamped SwiGLU, (up + 1) * gate * sigmoid(alpha * gate) with
# gate clamped to at most `limit` and up to [-limit, limit].
ACTIVATIONS = ("silu", "swiglu-oai")


def topk_route(
    logits: torch.Tensor,
    top_k: int,
    *,
    scoring: str = "softmax",
    renormalize: bool = True,
    correction_bias: torch.Tensor | None = None,
    n_group: int | None = None,
    topk_group: int | None = None,
    scaling: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's ``top_k`` experts from router logits [T, E].

    ``scoring``: "softmax" over the experts (Mixtral, Qwen-MoE) or "sigmoid" per expert
    (DeepSeek-V3); ``correction_bias`` [E] (DeepSeek's ``e_score_correction_bias``) is added to the
    scores for the choice only, not to the weights. ``renormalize``: the chosen weights are divided
    by their sum (``norm_topk_prob``). Returns (weights fp32 [T, top_k], expert ids int32
    [T, top_k]), best first; equal scores go to the lower expert id.

    ``n_group`` / ``topk_group``: DeepSeek-V3's group-limited choice (its ``noaux_tc``): the experts
    form ``n_group`` equal groups, each group is ranked by the sum of its two best biased scores
    (ties to the lower group), and only the experts of the ``topk_group`` best groups may be chosen
    (the others' biased scores count as 0, as there). Up to 256 experts in up to 32 groups this is
    the same one kernel (``moe_topk``; its CPU reference on the CPU); beyond, plain torch ops
    (capturable, no host synchronization; equal scores in torch.topk's order). ``scaling``: the
    weights are multiplied by it after the renormalization (``routed_scaling_factor``).
    """
    correction_bias = _check_routing(logits, top_k, scoring, correction_bias)
    _check_group_routing(logits.shape[1], top_k, n_group, topk_group, scaling)
    grouped = n_group is not None or topk_group is not None
    if grouped and (logits.shape[1] > 256 or n_group > 32):
        weights, ids = _group_limited(logits, top_k, scoring, renormalize, correction_bias, n_group, topk_group)
        return (weights * scaling if scaling != 1.0 else weights), ids
    return torch.ops.humming.moe_topk(
        _kernel_logits(logits), top_k, scoring, renormalize, correction_bias,
        n_group if grouped else 0, topk_group if grouped else 0, float(scaling),
    )  # fmt: skip


def _check_routing(logits, top_k, scoring, correction_bias) -> torch.Tensor | None:
    """ValueError / TypeError naming the bad one of a routing's logits [T, E], top_k, scoring and
    correction bias [E]; the bias as the kernels take it (fp32, contiguous, on the logits' device)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        raise ValueError(f"router logits must be a 2-D tensor [tokens, experts], got {_describe(logits)}")
    if not logits.is_floating_point():
        raise TypeError(f"router logits must be floating point, got {logits.dtype}")
    num_experts = logits.shape[1]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be an integer from 1 to the number of experts ({num_experts}), got {top_k!r}")
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {scoring!r}")
    if correction_bias is None:
        return None
    if correction_bias.shape != (num_experts,):
        raise ValueError(
            f"correction_bias must have shape ({num_experts},), one value per expert, got "
            f"{tuple(correction_bias.shape)}"
        )
    return correction_bias.to(device=logits.device, dtype=torch.float32).contiguous()


def _kernel_logits(logits: torch.Tensor) -> torch.Tensor:
    """Router logits as the routing kernels read them: f32 / f16 / bf16 with unit stride along E."""
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        logits = logits.float()
    return logits if logits.stride(-1) == 1 else logits.contiguous()


def _check_group_routing(num_experts: int, top_k: int, n_group, topk_group, scaling) -> None:
    """ValueError naming the bad one of topk_route's n_group / topk_group / scaling."""
    if not isinstance(scaling, (int, float)) or isinstance(scaling, bool) or not math.isfinite(scaling):
        raise ValueError(f"scaling must be a finite number, got {scaling!r}")
    if n_group is None and topk_group is None:
        return
    ok = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    if not (ok(n_group) and ok(topk_group) and n_group >= 1 and num_experts % n_group == 0):
        raise ValueError(
            f"n_group must divide the {num_experts} experts into equal groups and topk_group be given with it, "
            f"got n_group={n_group!r}, topk_group={topk_group!r}"
        )
    size = num_experts // n_group
    if not 1 <= topk_group <= n_group or top_k > topk_group * size:
        raise ValueError(
            f"topk_group must be from 1 to n_group ({n_group}) and its groups hold at least top_k ({top_k}) "
            f"experts ({size} per group), got {topk_group!r}"
        )


def _group_limited(logits, top_k, scoring, renormalize, bias, n_group, topk_group):
    """topk_route's group-limited choice (DeepSeek-V3, noaux_tc), in torch (arguments checked), for
    what the kernel does not take (more than 256 experts or 32 groups)."""
    size = logits.shape[1] // n_group
    scores = torch.sigmoid(logits.float()) if scoring == "sigmoid" else torch.softmax(logits.float(), -1)
    choice = scores if bias is None else scores + bias
    t = logits.shape[0]
    ranked = choice.view(t, n_group, size).topk(min(2, size), -1).values.sum(-1)
    groups = ranked.topk(topk_group, -1).indices
    allowed = torch.zeros(t, n_group, dtype=torch.bool, device=logits.device).scatter_(1, groups, True)
    choice = choice.masked_fill(~allowed.repeat_interleave(size, 1), 0.0)
    ids = choice.topk(top_k, -1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights, ids.to(torch.int32)


@dataclasses.dataclass(frozen=True)
class Alignment:
    """Assignments grouped by expert, each expert's rows padded to whole blocks of ``block_m``.

    ``sorted_ids`` int32 [capacity]: the assignment (``t * top_k + j``) of each row of the
    expert-sorted layout, ``num_assignments`` in padding rows; ``block_expert`` int32
    [capacity // block_m]: the expert of each block (-1 for blocks past ``num_padded``);
    ``num_padded`` int32 [1]: rows in use (a device tensor: no host synchronization);
    ``positions`` int32 [A]: the row of each assignment (the inverse of ``sorted_ids``);
    ``counts`` int32 [E]: assignments per expert; ``offsets`` int32 [E + 1]: each expert's first
    row in the padded layout. ``capacity`` = A + E x (block_m - 1) rounded up to ``block_m``: the
    most rows any routing can need, so shapes never depend on the routing.
    """

    sorted_ids: torch.Tensor
    block_expert: torch.Tensor
    num_padded: torch.Tensor
    positions: torch.Tensor
    counts: torch.Tensor
    offsets: torch.Tensor
    block_m: int
    num_assignments: int
    top_k: int

    @property
    def capacity(self) -> int:
        return self.sorted_ids.shape[0]


def moe_align(ids: torch.Tensor, num_experts: int, block_m: int, *, check_ids: bool = True) -> Alignment:
    """Group the assignments ``ids`` [T, top_k] (expert ids, as ``topk_route`` gives) by expert
    into blocks of ``block_m`` rows (the block M of the MoE GEMM instance that will run them).
    Within an expert, assignments keep their order (token-major). See :class:`Alignment`.

    ``check_ids``: refuse ids outside [0, num_experts) (on a GPU that reads them back to the host,
    a synchronization, skipped inside a CUDA-graph capture); False skips it, for ids known to be
    valid (``topk_route``'s), and an id out of range then counts as the nearest expert."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ValueError(f"expert ids must be a 2-D tensor [tokens, top_k], got {_describe(ids)}")
    if ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"expert ids must be int32 or int64, got {ids.dtype}")
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or not 1 <= num_experts <= 4096:
        raise ValueError(f"num_experts must be an integer from 1 to 4096, got {num_experts!r}")
    if isinstance(block_m, bool) or not isinstance(block_m, int) or block_m < 1:
        raise ValueError(f"block_m must be a positive integer, got {block_m!r}")
    dev = ids.device
    top_k = ids.shape[1]
    a = ids.numel()
    # An out-of-range id would land in another expert's rows: refused. Reading the values costs a
    # host synchronization on a GPU, so a call being captured into a CUDA graph skips the check
    # (its eager warm-up call, which graph capture needs anyway, has made it).
    capturing = dev.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if check_ids and a > 0 and dev.type != "meta" and not capturing:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"expert ids must lie in [0, {num_experts}), got values from {lo} to {hi}")
    out = torch.ops.humming.moe_align(ids.reshape(-1).to(torch.int32).contiguous(), num_experts, block_m)
    return Alignment(*out, block_m, a, top_k)


def _gather_operands(x: torch.Tensor, alignment: Alignment):
    """``x`` [T, H] checked against the alignment, with unit stride along H, and the sorted ids as
    int32 on x's device: what the ops that gather the expert-sorted rows take."""
    if x.dim() != 2 or x.shape[0] * alignment.top_k != alignment.num_assignments:
        raise ValueError(
            f"activations must be [tokens, hidden] with tokens x top_k = {alignment.num_assignments} "
            f"assignments, got shape {tuple(x.shape)} (top_k {alignment.top_k})"
        )
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"activations must be float32, float16 or bfloat16, got {x.dtype}")
    ids = alignment.sorted_ids.to(device=x.device, dtype=torch.int32)
    return (x if x.stride(-1) == 1 else x.contiguous()), ids


def permute(x: torch.Tensor, alignment: Alignment) -> torch.Tensor:
    """The activations [T, H] in the expert-sorted layout [capacity, H]: row r holds the token of
    assignment ``sorted_ids[r]``; padding rows are zeros."""
    x, ids = _gather_operands(x, alignment)
    return torch.ops.humming.moe_permute(x, ids, alignment.top_k)


def permute_quantize(x: torch.Tensor, alignment: Alignment, act_format):
    """:func:`permute` and :func:`humming_aot.quantize_act` in one pass: (codes, scales) of the
    expert-sorted rows [capacity, H] quantized to ``act_format`` (e4m3 / e5m2 / i8 with -pt or
    -g{K}), equal bit for bit to ``quantize_act(permute(x, alignment), act_format)``, read straight
    from the tokens' activations (padding rows: zero codes, scale 1) without writing the sorted rows
    in 16 bits: the input of an expert GEMM with 8-bit activations."""
    x, ids = _gather_operands(x, alignment)
    return torch.ops.humming.moe_permute_quantize(x, ids, alignment.top_k, _ops.act_format_text(act_format))


def combine(
    y: torch.Tensor,
    alignment: Alignment,
    weights: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """The experts' outputs in the expert-sorted layout [capacity, H] back to tokens [T, H]: each
    token's rows weighted by its routing weights [T, top_k] and summed in choice order (j = 0
    first), in fp32, returned in y's dtype. ``bias`` [E, H] with the assignments' experts ``ids``
    [T, top_k] (as :func:`topk_route` gives them): each row gets its expert's bias
    (in fp32) before its weight, the down projection's output bias (gpt-oss), in the same pass."""
    t = alignment.num_assignments // max(alignment.top_k, 1)
    if y.dim() != 2 or y.shape[0] != alignment.capacity:
        raise ValueError(
            f"expert outputs must be [{alignment.capacity}, hidden] (the alignment's rows), got {tuple(y.shape)}"
        )
    if weights.shape != (t, alignment.top_k):
        raise ValueError(f"routing weights must be [{t}, {alignment.top_k}], got {tuple(weights.shape)}")
    if y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"expert outputs must be float32, float16 or bfloat16, got {y.dtype}")
    if (bias is None) != (ids is None):
        raise ValueError("an expert output bias goes with the assignments' expert ids: give both or neither")
    if bias is not None:
        if ids.shape != (t, alignment.top_k):
            raise ValueError(f"expert ids must be [{t}, {alignment.top_k}], got {tuple(ids.shape)}")
        bias = bias.to(device=y.device, dtype=torch.float32).contiguous()
        ids = ids.to(device=y.device, dtype=torch.int32).contiguous()
    pos = alignment.positions.to(device=y.device, dtype=torch.int32)
    return torch.ops.humming.moe_combine(
        y.contiguous(), pos, weights.to(device=y.device, dtype=torch.float32).contiguous(), bias, ids
    )


_OUT_TYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _gate_up_operands(h, activation: str, bias, offsets):
    """:func:`activate`'s and :func:`activate_quantize`'s gate-up outputs, bias and offsets checked and
    as the op reads them (h with unit stride along its rows, bias fp32 and offsets int32 on h's
    device, contiguous)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    if not isinstance(h, torch.Tensor) or h.dim() != 2 or h.shape[1] % 2:
        raise ValueError(f"gate-up outputs must be a 2-D tensor [rows, 2 x intermediate], got {_describe(h)}")
    if h.dtype not in _OUT_TYPES:
        raise TypeError(f"gate-up outputs must be float32, float16 or bfloat16, got {h.dtype}")
    if h.stride(-1) != 1:
        h = h.contiguous()
    if bias is not None:
        bias = bias.to(device=h.device, dtype=torch.float32).contiguous()
    if offsets is not None:
        offsets = offsets.to(device=h.device, dtype=torch.int32).contiguous()
    return h, bias, offsets


def activate(
    h: torch.Tensor,
    activation: str = "silu",
    *,
    bias: torch.Tensor | None = None,
    offsets: torch.Tensor | None = None,
    limit: float = 7.0,
    alpha: float = 1.702,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The experts' activation between their GEMMs, in one pass (``torch.ops.humming.moe_activation``,
    a CUDA kernel and a CPU reference): gate-up outputs ``h`` [rows, 2F] (gate first) to [rows, F]
    in ``dtype`` (default h's), computed in fp32. ``activation``: "silu", silu(gate) x up, or
    "swiglu-oai", gpt-oss's gate clamped to at most ``limit`` and up to [-limit, limit], then
    gate x sigmoid(``alpha`` x gate) x (up + 1). ``bias`` [E, 2F]: each row's expert's bias is added
    to gate and up first; the rows' experts come from ``offsets`` [E + 1] (each expert's first row
    in the expert-sorted layout, as :func:`moe_align` gives them; rows past the last expert's count
    as its), or, without offsets, every row is expert 0's. On a GPU the results equal the torch
    formula's to fp32 rounding (the two ``exp`` differ in the last bit), then rounded once."""
    h, bias, offsets = _gate_up_operands(h, activation, bias, offsets)
    out = h.dtype if dtype is None else dtype
    if out not in _OUT_TYPES:
        raise TypeError(f"the activation's dtype must be float32, float16 or bfloat16, got {out}")
    return torch.ops.humming.moe_activation(h, bias, offsets, activation, float(limit), float(alpha), _OUT_TYPES[out])


def activate_quantize(
    h: torch.Tensor,
    act_format,
    activation: str = "silu",
    *,
    bias: torch.Tensor | None = None,
    offsets: torch.Tensor | None = None,
    limit: float = 7.0,
    alpha: float = 1.702,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`activate` in h's dtype, then :func:`humming_aot.quantize_act` of the result with
    ``act_format`` (e4m3 / e5m2 / i8 with -pt or -g{K}): (codes, scales), bit for bit those two
    (``torch.ops.humming.moe_activation_quantize``: the activation kernel, then the quantization
    kernel, through a temporary of the activations)."""
    h, bias, offsets = _gate_up_operands(h, activation, bias, offsets)
    return torch.ops.humming.moe_activation_quantize(
        h, bias, offsets, activation, float(limit), float(alpha), _ops.act_format_text(act_format)
    )


@dataclasses.dataclass(frozen=True)
class StackedExperts:
    """The packed weights of E experts of one format, shape and layout, stacked for
    :func:`moe_gemm`: ``codes`` [E, n_pad, words], ``scales`` / ``zeros`` [E, k_groups, n_groups]
    (None where the format has none). ``expert(e)`` is expert e's ``PackedWeight``, a view of these
    tensors (no copy)."""

    codes: torch.Tensor
    scales: torch.Tensor | None
    zeros: torch.Tensor | None
    first: object  # expert 0's PackedWeight: format, extents and layout of them all

    @property
    def num_experts(self) -> int:
        return self.codes.shape[0]

    def expert(self, e: int):
        pick = lambda t: None if t is None else t[e]  # noqa: E731
        return dataclasses.replace(self.first, codes=self.codes[e], scales=pick(self.scales), zeros=pick(self.zeros))


def stack_experts(weights) -> StackedExperts:
    """Stack the ``PackedWeight`` of each expert (one format, shape and layout; no global scale)."""
    from .pack import PackedWeight

    weights = list(weights)
    if not weights or not all(isinstance(w, PackedWeight) for w in weights):
        raise TypeError("stack_experts takes a non-empty list of PackedWeight (humming_aot.pack_weight)")
    w0 = weights[0]
    for e, w in enumerate(weights):
        if (w.fmt_text, w.n, w.k, w.layout, w.device) != (w0.fmt_text, w0.n, w0.k, w0.layout, w0.device):
            raise ValueError(
                f"expert {e} is {w.fmt_text} [{w.n}, {w.k}] in layout {w.layout} on {w.device}; expert 0 is "
                f"{w0.fmt_text} [{w0.n}, {w0.k}] in layout {w0.layout} on {w0.device}: experts must match"
            )
        if w.global_scale is not None:
            raise ValueError("grouped (MoE) GEMMs take no global scale yet (a format with -gs)")
    stack = lambda ts: None if ts[0] is None else torch.stack(ts)  # noqa: E731
    return StackedExperts(
        torch.stack([w.codes for w in weights]),
        stack([w.scales for w in weights]),
        stack([w.zeros for w in weights]),
        w0,
    )


def _grouped_format(experts, fmt, op: str):
    """The GEMM format of a grouped GEMM over ``experts`` (checked against their weight format)."""
    from . import formats as F

    if not isinstance(experts, StackedExperts):
        raise TypeError(f"{op} takes the experts as StackedExperts (stack_experts), got {type(experts).__name__}")
    g = F.parse_gemm_format(fmt)
    if str(g.weight) != experts.first.fmt_text:
        raise F.FormatError(
            f"the GEMM format's weight part {g.weight} differs from the experts' format {experts.first.fmt_text}"
        )
    return g


def moe_gemm(x: torch.Tensor, experts: StackedExperts, offsets: torch.Tensor, fmt, *, rows_per_expert=None,
             instance: str = "", assignments=None, activation: str | None = None, limit: float = 7.0,
             alpha: float = 1.702, activation_bias: torch.Tensor | None = None,
             a_scales: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The grouped GEMM over contiguous rows: out[r] = x[r] @ W_e.T for the rows r of expert e,
    ``offsets[e] <= r < offsets[e + 1]`` (``offsets`` int32 [E + 1] from 0 to x's rows, on x's
    device; a GPU reads them only in the kernel, so no host synchronization). ``fmt`` is the GEMM
    format: 16-bit activations, or 8-bit ones (``x`` the codes and ``a_scales`` their fp32 scales,
    [rows, groups], as :func:`humming_aot.quantize_act` gives them; on a GPU the grouped instances
    of the sm90 8-bit activation kernels, 8-bit weights in the generic layout or 4-bit ones in
    layout 4). ``rows_per_expert`` (default rows / E) picks the tile: up to
    256 the tile height of least expected work (the row tiles of Poisson counts around it, some
    experts spilling into a second tile, times the device table's tile costs; humming.h,
    expected_row_tiles), else as for a dense GEMM of that many rows (select_grouped_instance).
    ``assignments`` (the rows routed in all before padding, tokens x top_k, where the caller
    knows it) picks the tile's width and how the kernel's producer walks the experts' tiles
    (humming.h, grouped_pick): twice the channels where the launch is expected to
    have more than one tile per multiprocessor and the build has that tile (decode tiles of 8 rows),
    one thread walking where it is expected to have many (instances ending ``_lone``); where it is
    not given, the narrow tile and its first warp. On a GPU it runs on the grouped
    instances of the sm90 weight-only kernels (scheduler ``moe``, weights packed for layout 3); on
    the CPU, on the reference.

    ``activation`` (one of :data:`ACTIVATIONS`; ``limit`` / ``alpha`` for "swiglu-oai"): the weight
    is a gate-up one (the F gate rows, then the F up rows) and the result is :func:`activate` of
    the GEMM's output, [rows, F], with ``activation_bias`` fp32 [E, 2F] (gate first) for each row's
    expert where given. On a GPU, in builds with ``+experimental`` (the epilogue's activation is
    correct but was slower than the two launches on an H100, session 38), the kernel computes it in
    its epilogue where it can (F a multiple of 64;
    every grouped tile but the 256-row one): one launch, and no [rows, 2F] output; else the GEMM and
    :func:`activate` run one after the other. Both give the same values, bit for bit."""
    g = _grouped_format(experts, fmt, "moe_gemm")
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"moe_gemm takes activations [rows, k], got {_describe(x)}")
    if not isinstance(offsets, torch.Tensor) or offsets.shape != (experts.num_experts + 1,):
        raise ValueError(
            f"expert row offsets must be a tensor [{experts.num_experts + 1}] (one more than the experts), got "
            f"{_describe(offsets)}"
        )
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)} or None, got {activation!r}")
    if activation is None and activation_bias is not None:
        raise ValueError("activation_bias needs an activation")
    w0 = experts.first
    if activation is not None and w0.n % 2:
        raise ValueError(f"a gated activation needs the gate and up halves of an even n, got n={w0.n}")
    if activation_bias is not None:
        if not isinstance(activation_bias, torch.Tensor) or tuple(activation_bias.shape) != (experts.num_experts, w0.n):
            raise ValueError(
                f"activation_bias must be a tensor [experts, 2F] = [{experts.num_experts}, {w0.n}], got "
                f"{_describe(activation_bias)}"
            )
        activation_bias = activation_bias.to(device=x.device, dtype=torch.float32).contiguous()
    rows = rows_per_expert if rows_per_expert is not None else max(1, x.shape[0] // experts.num_experts)
    x = _ops.activation_operand(x, x.is_cuda)
    return torch.ops.humming.moe_gemm(
        x, experts.codes, experts.scales, experts.zeros, offsets.to(device=x.device, dtype=torch.int32).contiguous(),
        str(g), w0.layout, w0.n, w0.k, int(rows), instance, _assignments(assignments), activation or "",
        float(limit), float(alpha), activation_bias, a_scales,
    )  # fmt: skip


def _assignments(assignments) -> int:
    """The ops' ``assignments`` argument: a count of at least 0, or -1 for unknown (None)."""
    if assignments is None:
        return -1
    if isinstance(assignments, torch.SymInt):  # traced (torch.compile): the op takes it as it is
        return assignments
    if isinstance(assignments, bool) or not isinstance(assignments, int) or assignments < 0:
        raise ValueError(f"assignments must be a non-negative int (tokens x top_k) or None, got {assignments!r}")
    return assignments


def moe_gemm_masked(x: torch.Tensor, experts: StackedExperts, counts: torch.Tensor, fmt, *, rows_per_expert=None,
                    instance: str = "", assignments=None,
                    a_scales: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """The grouped GEMM over masked rows, the decode layout whose shapes never depend on the
    routing: ``x`` [E, capacity, k] holds a slot per expert, of which expert e's rows are the first
    ``counts[e]`` (``counts`` int32 [E] on x's device, read only by the kernel on a GPU). Returns
    [E, capacity, n]: out[e, r] = x[e, r] @ W_e.T for r < counts[e]; on a GPU the rest of each slot
    is left unwritten (undefined values; zeros on the CPU). A count outside [0, capacity] is an
    error on the CPU and clipped to that range on a GPU (which cannot report it).
    ``rows_per_expert`` (default the capacity) picks the tile and ``assignments`` the producer's
    walk, as for :func:`moe_gemm`. With 8-bit activations, ``a_scales`` fp32 [E, capacity, groups]."""
    g = _grouped_format(experts, fmt, "moe_gemm_masked")
    e = experts.num_experts
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[0] != e:
        raise ValueError(f"moe_gemm_masked takes activations [{e} experts, capacity, k], got {_describe(x)}")
    if not isinstance(counts, torch.Tensor) or counts.shape != (e,):
        raise ValueError(f"expert row counts must be a tensor [{e}] (one per expert), got {_describe(counts)}")
    w0 = experts.first
    rows = rows_per_expert if rows_per_expert is not None else x.shape[1]
    if not x.is_contiguous() or (x.is_cuda and x.data_ptr() % 16 != 0):
        x = x.clone(memory_format=torch.contiguous_format)  # evenly spaced, aligned rows, as the kernels read
    return torch.ops.humming.moe_gemm_masked(
        x, experts.codes, experts.scales, experts.zeros, counts.to(device=x.device, dtype=torch.int32).contiguous(),
        str(g), w0.layout, w0.n, w0.k, int(rows), instance, _assignments(assignments), a_scales,
    )  # fmt: skip


_WARNED_LOOP = False


@functools.lru_cache(maxsize=256)
def _has_grouped_instance(fmt: str, layout: int) -> bool:
    """Whether this build has a grouped (scheduler "moe") instance that computes GEMM format ``fmt``
    from weights packed in ``layout``."""
    from . import dispatch, registry
    from . import formats as F

    g = F.parse_gemm_format(fmt)
    return any(i.scheduler == "moe" and i.layout == layout and dispatch._computes(i, g) for i in registry.instances())


class QuantMoE(torch.nn.Module):
    """A mixture-of-experts MLP of quantized experts: route each token to its ``top_k`` experts
    (:func:`topk_route`), run each expert's gate-up projection, ``silu(gate) * up``, its down
    projection, and combine the outputs with the routing weights (:func:`combine`).

    ``gate_up``: one ``PackedWeight`` [2F, H] per expert, the F gate rows first, then the F up rows
    (the fused w1 / w3 of Mixtral- and Qwen-style experts); ``down``: one [H, F] per expert, all in
    one format each. ``scoring`` / ``renormalize`` / ``correction_bias`` as :func:`topk_route`.
    ``n_group`` / ``topk_group`` / ``routed_scaling``: DeepSeek-V3's group-limited routing and
    weight scale (:func:`topk_route`'s ``n_group``, ``topk_group``, ``scaling``).
    ``activation``: one of :data:`ACTIVATIONS` (``swiglu_alpha`` / ``swiglu_limit`` for
    "swiglu-oai", gpt-oss's 1.702 and 7.0 by default). ``gate_up_bias`` [E, 2F] (gate first, as the
    weight) and ``down_bias`` [E, H]: each expert's biases, added to its GEMMs' outputs in fp32.

    On the CPU, or on a GPU where this build has grouped instances of both GEMMs' formats for the
    experts' layout (16-bit activations: the sm90 weight-only kernels, layout 3; 8-bit activations:
    the sm90 8-bit activation kernels, e4m3 weights in the generic layout or 4-bit ones (W4A8) in
    layout 4, the activations quantized on the GPU before each GEMM), the two GEMMs are grouped
    ones (:func:`moe_gemm`) over the expert-sorted rows: no host synchronization, so a call can be
    captured in a CUDA graph. Otherwise each expert that has tokens runs its two GEMMs as dense
    humming GEMMs on its rows (the instance the dispatcher picks for that row count), which needs
    the per-expert counts on the host, one synchronization per call on a GPU, so such a call cannot
    be captured in a CUDA graph (refused with an error); on a GPU the first call warns once.
    """

    def __init__(
        self,
        gate_up,
        down,
        top_k: int,
        *,
        act_format=None,
        out_dtype=None,
        scoring: str = "softmax",
        renormalize: bool = True,
        correction_bias: torch.Tensor | None = None,
        activation: str = "silu",
        swiglu_alpha: float = 1.702,
        swiglu_limit: float = 7.0,
        gate_up_bias: torch.Tensor | None = None,
        down_bias: torch.Tensor | None = None,
        n_group: int | None = None,
        topk_group: int | None = None,
        routed_scaling: float = 1.0,
    ):
        from .layers import QuantLinear
        from .pack import PackedWeight

        super().__init__()
        gate_up, down = list(gate_up), list(down)
        if not gate_up or len(gate_up) != len(down):
            raise ValueError(
                f"QuantMoE takes one gate-up and one down weight per expert, got {len(gate_up)} and {len(down)}"
            )
        if not all(isinstance(w, PackedWeight) for w in gate_up + down):
            raise TypeError("QuantMoE's expert weights must be PackedWeight (humming_aot.pack_weight)")
        h, f2 = gate_up[0].k, gate_up[0].n
        for e, (gu, dn) in enumerate(zip(gate_up, down)):
            if gu.n % 2 or (gu.n, gu.k) != (f2, h) or (dn.n, dn.k) != (h, f2 // 2):
                raise ValueError(
                    f"expert {e}: gate-up must be [2F, H] = [{f2}, {h}] and down [H, F] = [{h}, {f2 // 2}] like "
                    f"expert 0 (2F even), got [{gu.n}, {gu.k}] and [{dn.n}, {dn.k}]"
                )
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= len(gate_up):
            raise ValueError(f"top_k must be an integer from 1 to the {len(gate_up)} experts, got {top_k!r}")
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, got {scoring!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
        for name, bias, shape in (
            ("gate_up_bias", gate_up_bias, (len(gate_up), f2)),
            ("down_bias", down_bias, (len(gate_up), h)),
        ):
            if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != shape):
                raise ValueError(f"{name} must be a tensor [experts, outputs] = {list(shape)}, got {_describe(bias)}")
        act = act_format if act_format is not None else "bf16"
        # Stacked once for the grouped GEMM; the per-expert layers are views of the stacks (no copy).
        grouped = all(w.global_scale is None for w in gate_up + down) and len({w.layout for w in gate_up + down}) == 1
        self._stacks = (stack_experts(gate_up), stack_experts(down)) if grouped else None
        self._grouped_instances_built = None  # _grouped_built's answer, once asked
        if self._stacks is not None:
            gate_up = [self._stacks[0].expert(e) for e in range(len(gate_up))]
            down = [self._stacks[1].expert(e) for e in range(len(down))]
        self.gate_up = torch.nn.ModuleList(QuantLinear.from_packed(w, act, out_dtype) for w in gate_up)
        self.down = torch.nn.ModuleList(QuantLinear.from_packed(w, act, out_dtype) for w in down)
        self.num_experts, self.top_k, self.hidden, self.intermediate = len(gate_up), top_k, h, f2 // 2
        self.scoring, self.renormalize = scoring, renormalize
        self.n_group, self.topk_group, self.routed_scaling = n_group, topk_group, routed_scaling
        _check_group_routing(len(gate_up), top_k, n_group, topk_group, routed_scaling)
        self.activation, self.swiglu_alpha, self.swiglu_limit = activation, float(swiglu_alpha), float(swiglu_limit)
        if correction_bias is not None and (
            not isinstance(correction_bias, torch.Tensor) or tuple(correction_bias.shape) != (len(gate_up),)
        ):
            raise ValueError(
                f"correction_bias must be a tensor [experts] = [{len(gate_up)}], got {_describe(correction_bias)}"
            )
        dev = gate_up[0].codes.device
        f32 = lambda b: None if b is None else b.detach().to(device=dev, dtype=torch.float32)  # noqa: E731
        # On the experts' device once: a CPU bias would be copied in every forward, which also breaks
        # CUDA graph capture (session 39's first GPU run of a DeepSeek-style layer from a CPU bias).
        self.register_buffer("correction_bias", f32(correction_bias), persistent=False)
        self.register_buffer("gate_up_bias", f32(gate_up_bias), persistent=False)
        self.register_buffer("down_bias", f32(down_bias), persistent=False)

    @classmethod
    def from_float(
        cls,
        w_gate_up: torch.Tensor,
        w_down: torch.Tensor,
        weight_format,
        top_k: int,
        *,
        layout="auto",
        device=None,
        **kwargs,
    ) -> "QuantMoE":
        """Quantize float experts (``w_gate_up`` [E, 2F, H], gate rows first; ``w_down`` [E, H, F])
        with the reference quantizer and pack them for ``layout`` on ``device`` (default: the
        tensors' device). Other arguments as the constructor."""
        from . import formats as F
        from . import reference as R
        from .dispatch import preferred_layout
        from .pack import layout_id, pack_weight

        if w_gate_up.dim() != 3 or w_down.dim() != 3 or w_gate_up.shape[0] != w_down.shape[0]:
            raise ValueError(
                f"float experts must be [E, 2F, H] and [E, H, F], got {tuple(w_gate_up.shape)} and {tuple(w_down.shape)}"
            )
        dev = torch.device(device) if device is not None else w_gate_up.device

        def pack(w):
            q = R.quantize_weight(w.detach().float().cpu(), weight_format)
            lid = layout
            if layout == "auto":  # as QuantLinear.from_linear: the format the layer will compute
                act = F.parse_activation_format(kwargs.get("act_format") or "bf16")
                out = kwargs.get("out_dtype")
                out = out if out is not None else ("bf16" if act.quantized else str(act.type))
                lid = preferred_layout(F.GemmFormat(act, q.fmt, out), dev, n=w.shape[0], k=w.shape[1])
            return pack_weight(q, layout=layout_id(lid)).to(dev)

        return cls([pack(w) for w in w_gate_up], [pack(w) for w in w_down], top_k, **kwargs)

    @classmethod
    def from_checkpoint(
        cls,
        source,
        prefix: str,
        top_k: int,
        *,
        config=None,
        layout="auto",
        device=None,
        progress: bool = False,
        **kwargs,
    ) -> "QuantMoE":
        """The experts of one mixture-of-experts layer of a quantized checkpoint (a GPTQ, AWQ,
        compressed-tensors, FP8-block, gpt-oss MXFP4, ... directory or state dict:
        :func:`humming_aot.loading.load_experts`, which names what it accepts and refuses), each
        expert's gate and up projections stacked exactly into one [2F, H] weight, packed for
        ``layout`` ("auto": the preferred layout of the format on ``device``) on ``device``
        (default: the CPU), with the checkpoint's expert biases, activation (gpt-oss's
        "swiglu-oai") and router score correction (DeepSeek-V3's ``e_score_correction_bias``)
        unless given. ``prefix``: the layer's module, e.g. ``model.layers.3.mlp``. The router's
        weight is not part of it: ``forward`` takes its logits. The routing settings are the
        model config's, given here: gpt-oss: the defaults (softmax over the top-k logits is
        ``scoring="softmax"`` with ``renormalize=True``); DeepSeek-V3: ``scoring="sigmoid"``,
        ``n_group=8``, ``topk_group=4``, ``routed_scaling=2.5``.

        On a GPU, experts whose scales are in another float type than the activations (GPTQ's f16
        scales with bf16 activations) and that no compiled kernel takes so have their scales
        rounded to the activation type, with one warning, as ``replace_linears`` does. Other
        arguments as the constructor (``act_format``, ``out_dtype``, ``scoring``, ...)."""
        from . import formats as F
        from .loading import _pack_converted, _warn_rounded, load_experts

        experts = load_experts(source, prefix, config, progress=progress)
        dev = torch.device(device) if device is not None else torch.device("cpu")
        act = F.parse_activation_format(kwargs.get("act_format") or "bf16")
        out = kwargs.get("out_dtype")
        out = str(out) if out is not None else ("bf16" if act.quantized else str(act.type))
        rounded = []

        def pack(cw, name):
            packed, was_rounded = _pack_converted(cw.weight, act, out, layout, dev)
            if was_rounded:
                rounded.append(name)
            return packed

        base = prefix.rstrip(".") + ".experts"
        gu = [pack(cw, f"{base}.{e}.gate_up") for e, cw in enumerate(experts.gate_up)]
        dn = [pack(cw, f"{base}.{e}.down") for e, cw in enumerate(experts.down)]
        if rounded:
            _warn_rounded("QuantMoE.from_checkpoint", rounded)
        kwargs.setdefault("activation", experts.activation)
        kwargs.setdefault("gate_up_bias", experts.gate_up_bias)
        kwargs.setdefault("down_bias", experts.down_bias)
        kwargs.setdefault("correction_bias", experts.correction_bias)
        return cls(gu, dn, top_k, **kwargs)

    def forward(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        global _WARNED_LOOP
        if x.dim() != 2 or x.shape[1] != self.hidden:
            raise ValueError(f"QuantMoE takes activations [tokens, {self.hidden}], got shape {tuple(x.shape)}")
        if router_logits.shape != (x.shape[0], self.num_experts):
            raise ValueError(
                f"router logits must be [tokens, experts] = [{x.shape[0]}, {self.num_experts}], "
                f"got {tuple(router_logits.shape)}"
            )
        if self._grouped_on(x):
            return self._forward_grouped(x, router_logits)
        if x.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "QuantMoE with these experts cannot be captured in a CUDA graph: it runs the per-expert loop, which "
                "reads the per-expert token counts back to the host. The grouped MoE GEMMs, which do not, need the "
                "experts in a format and layout this build has grouped instances for "
                "(humming_aot.registry.instances(), scheduler 'moe')"
            )
        if x.is_cuda and not _WARNED_LOOP:
            import warnings

            _WARNED_LOOP = True
            warnings.warn(
                "QuantMoE runs each expert's GEMMs as dense GEMMs, one pair per expert with tokens, after a host "
                "synchronization (the grouped MoE kernels are not built yet): correct, but slower than a grouped "
                "GEMM at small batch",
                stacklevel=2,
            )
        weights, ids, al = self._route(x, router_logits)
        rows = permute(x, al)
        # Blocks of one row pad nothing: every row belongs to an expert and is written below.
        y = x.new_empty(al.capacity, self.hidden, dtype=self.down[0]._out_dtype)
        start = 0
        for e, c in enumerate(al.counts.tolist()):
            if c == 0:
                continue
            bias = None if self.gate_up_bias is None else self.gate_up_bias[e : e + 1]
            act = self._activate(self.gate_up[e](rows[start : start + c]), x.dtype, bias)
            y[start : start + c] = self.down[e](act)
            start += c
        return self._combine(y, al, weights, ids)

    def _combine(self, y: torch.Tensor, al: Alignment, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """The tokens' outputs from the experts' (:func:`combine`), each row with its expert's
        down bias where the layer has one."""
        if self.down_bias is None:
            return combine(y, al, weights)
        return combine(y, al, weights, bias=self.down_bias, ids=ids)

    def _activate(self, h: torch.Tensor, dtype: torch.dtype, bias=None, offsets=None) -> torch.Tensor:
        """The experts' activation of gate-up outputs ``h`` [rows, 2F] (:func:`activate`: one
        kernel), with ``bias`` [E', 2F] of the rows' experts, found through ``offsets`` [E' + 1]
        (or the one expert of all rows, without offsets), in fp32, returned in ``dtype`` for the
        down GEMM."""
        return activate(
            h, self.activation, bias=bias, offsets=offsets, limit=self.swiglu_limit, alpha=self.swiglu_alpha,
            dtype=dtype,
        )  # fmt: skip

    def _route(self, x: torch.Tensor, router_logits: torch.Tensor):
        """Routing weights and expert ids, and the alignment (blocks of one row: the experts' rows
        back to back)."""
        weights, ids = topk_route(
            router_logits, self.top_k, scoring=self.scoring, renormalize=self.renormalize,
            correction_bias=self.correction_bias, n_group=self.n_group, topk_group=self.topk_group,
            scaling=self.routed_scaling,
        )  # fmt: skip
        al = moe_align(ids, self.num_experts, 1, check_ids=False)  # topk_route's ids are valid: no host sync
        return weights, ids, al

    def _grouped_on(self, x: torch.Tensor) -> bool:
        """Whether this call runs the grouped GEMMs: on the CPU reference, or on a GPU where this
        build has grouped instances of both formats for the experts' layout (others take the
        per-expert loop)."""
        if self._stacks is None:
            return False
        if x.device.type == "cpu":
            return True
        return x.is_cuda and self._grouped_built()

    def _grouped_built(self) -> bool:
        """Whether this build has grouped instances of both GEMMs' formats for the experts' layout
        (asked once per layer: the registry does not change while the process runs)."""
        if self._grouped_instances_built is None:
            self._grouped_instances_built = all(
                _has_grouped_instance(str(lin.fmt), stack.first.layout)
                for lin, stack in zip((self.gate_up[0], self.down[0]), self._stacks)
            )
        return self._grouped_instances_built

    def _grouped_gemm(self, a, stack, fmt, al: Alignment, per_expert: int, routed: int, **kw):
        """One grouped GEMM of the layer over the expert-sorted rows ``a`` (16-bit): with 8-bit
        activations, ``a`` quantized first (on the GPU: one kernel), or given as quantized (codes,
        scales)."""
        a_scales = None
        if isinstance(a, tuple):
            a, a_scales = a
        elif fmt.act.quantized:
            a, a_scales = _ops.quantize_act(a, fmt.act)
        return moe_gemm(
            a, stack, al.offsets, fmt, rows_per_expert=per_expert, assignments=routed, a_scales=a_scales, **kw
        )

    def _forward_grouped(self, x: torch.Tensor, router_logits: torch.Tensor) -> torch.Tensor:
        # No host synchronization: the experts' rows are device offsets that the kernels read.
        weights, ids, al = self._route(x, router_logits)
        per_expert = max(1, al.capacity // self.num_experts)
        gu, dn = self._stacks
        routed = x.shape[0] * self.top_k
        fmt = self.gate_up[0].fmt
        # With 8-bit activations, the sorted rows are quantized as they are gathered (one pass over
        # the tokens' activations instead of writing 16-bit rows and reading them back).
        rows = permute_quantize(x, al, fmt.act) if fmt.act.quantized else permute(x, al)
        down_act = self.down[0].fmt.act
        if down_act.quantized and _OUT_TYPES.get(x.dtype) == str(fmt.out):
            # The down GEMM's 8-bit activations from the gate-up outputs by one op (activate_quantize),
            # where a one-pass kernel can take the place of the activation and quantization kernels.
            h = self._grouped_gemm(rows, gu, fmt, al, per_expert, routed)
            offsets = al.offsets if self.gate_up_bias is not None else None
            act = activate_quantize(
                h, down_act, self.activation, bias=self.gate_up_bias, offsets=offsets, limit=self.swiglu_limit,
                alpha=self.swiglu_alpha,
            )  # fmt: skip
        elif _OUT_TYPES.get(x.dtype) == str(fmt.out):
            # The activation in the gate-up GEMM (its epilogue where the kernel can).
            act = self._grouped_gemm(
                rows, gu, fmt, al, per_expert, routed, activation=self.activation, limit=self.swiglu_limit,
                alpha=self.swiglu_alpha, activation_bias=self.gate_up_bias,
            )  # fmt: skip
        else:
            h = self._grouped_gemm(rows, gu, fmt, al, per_expert, routed)
            act = self._activate(h, x.dtype, self.gate_up_bias, al.offsets if self.gate_up_bias is not None else None)
        y = self._grouped_gemm(act, dn, self.down[0].fmt, al, per_expert, routed)
        return self._combine(y, al, weights, ids)

    def instances(self, tokens: int, *, device=None, cc: int | None = None, sms: int | None = None) -> dict:
        """The grouped instances a call of ``tokens`` tokens runs, ``{"gate_up": name, "down":
        name}``, chosen as the call chooses them (the tile height from the rows per expert, its width
        and walk from the routed rows: humming.h, select_grouped_instance and grouped_pick): on
        ``device`` (default: the current CUDA device), or on a device described by its compute
        capability ``cc`` (major * 10 + minor) and multiprocessor count ``sms``, which needs no GPU.
        A ValueError for a layer that does not run grouped GEMMs on a GPU (experts not packed for
        the grouped kernels' layout, or no grouped instance of its formats in this build)."""
        from ._ext import C
        from .dispatch import _device_facts

        tokens = operator.index(tokens)
        if tokens < 1:
            raise ValueError(f"tokens must be at least 1, got {tokens}")
        if (cc is None) != (sms is None):
            raise ValueError("give both cc and sms to describe a device, or neither")
        if self._stacks is None:
            raise ValueError("this layer runs no grouped GEMMs: its experts differ in layout or have global scales")
        missing = [
            f"{lin.fmt} in layout {stack.first.layout}"
            for lin, stack in zip((self.gate_up[0], self.down[0]), self._stacks)
            if not _has_grouped_instance(str(lin.fmt), stack.first.layout)
        ]
        if missing:
            raise ValueError(f"this layer runs no grouped GEMMs on a GPU: this build has no grouped instance of "
                             f"{', '.join(missing)}")  # fmt: skip
        if cc is None:
            cc, sms, _ = _device_facts(device)
        routed = tokens * self.top_k
        per_expert = max(1, routed // self.num_experts)  # as the call's: capacity // experts
        out = {}
        for part, stack, lin in (
            ("gate_up", self._stacks[0], self.gate_up[0]),
            ("down", self._stacks[1], self.down[0]),
        ):
            w, fmt = stack.first, str(_grouped_format(stack, lin.fmt, "QuantMoE.instances"))
            out[part] = C.select_grouped_instance(
                fmt, w.layout, w.n, w.k, per_expert, self.num_experts, routed, cc, sms
            )
        return out

    def extra_repr(self) -> str:
        return (
            f"experts={self.num_experts}, top_k={self.top_k}, hidden={self.hidden}, intermediate={self.intermediate}, "
            f"format={self.gate_up[0].fmt.weight}, scoring={self.scoring}, activation={self.activation}"
        )


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"shape {tuple(t.shape)}"
    return type(t).__name__
