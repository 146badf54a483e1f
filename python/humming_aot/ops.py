"""torch.ops.humming: the compiled ops, their fake (meta) kernels, and thin Python wrappers.

Ops (schemas in src/torch/ops.cpp):

* ``gemm(a, codes, scales, zeros, global_scale, a_scales, bias, fmt, layout, n, k, instance='')``
* ``pack_weight(codes, scales, zeros, weight_format, layout) -> (codes, scales, zeros)``
* ``unpack_weight(codes, scales, zeros, weight_format, layout, n, k) -> (codes, scales, zeros)``
* ``quantize_act(x, act_format) -> (codes, scales)``
* ``auto_gemm(...)``: ``gemm``'s arguments; with ``instance=''`` the Python dispatcher
  (:mod:`humming_aot.dispatch`: its tables, ``load_table``, ``force``) chooses the instance inside
  the op, at run time. Defined here in Python; it is what torch.compile traces in place of ``gemm``.

Each has CUDA and CPU kernels (the CPU ones are the reference reading the packed layout) and a
fake kernel here, so they trace under torch.compile and run on meta tensors. humming_aot._ext
imports this module, so the fake kernels are registered whenever the ops are. Absent outputs of
pack/unpack are empty tensors; the Python API turns them into ``None``.
"""

from __future__ import annotations

import os

import torch

from . import formats as F
from ._ext import C
from .reference import torch_dtype

__all__ = ["gemm", "quantize_act"]


def _act_scale_cols(afmt: F.ActivationFormat, k: int) -> int:
    group = afmt.group_k if afmt.granularity == "group" else k
    return -(-k // group)


def _check_same_device(first: torch.Tensor, first_what: str, **others) -> None:
    """The fake kernels run for meta tensors too, so a meta tensor mixed with CPU ones reaches them
    instead of the real kernel's device check: check here, with the real kernel's message."""
    for what, t in others.items():
        if t is not None and t.device != first.device:
            raise ValueError(
                f"{what.replace('_', ' ')} is on {t.device} but the {first_what} are on {first.device}; "
                "every tensor of one call must be on the same device"
            )


@torch.library.register_fake("humming::gemm")
def _gemm_fake(a, codes, scales, zeros, global_scale, a_scales, bias, fmt, layout, n, k, instance=""):
    g = F.parse_gemm_format(fmt)
    _check_same_device(
        a,
        "activations",
        packed_codes=codes,
        scales=scales,
        zero_points=zeros,
        global_scale=global_scale,
        activation_scales=a_scales,
        bias=bias,
    )
    torch._check(a.dim() == 2, lambda: f"activations must be 2-D [m, k], got {a.dim()}-D")
    torch._check(a.shape[1] == k, lambda: f"activations have {a.shape[1]} columns but the weight has k={k}")
    return a.new_empty((a.shape[0], n), dtype=torch_dtype(g.out))


@torch.library.register_fake("humming::moe_gemm")
def _moe_gemm_fake(
    a,
    codes,
    scales,
    zeros,
    offsets,
    fmt,
    layout,
    n,
    k,
    rows_per_expert,
    instance="",
    assignments=-1,
    activation="",
    limit=0.0,
    alpha=0.0,
    activation_bias=None,
    a_scales=None,
):
    g = F.parse_gemm_format(fmt)
    _check_same_device(
        a,
        "activations",
        packed_codes=codes,
        scales=scales,
        zero_points=zeros,
        expert_offsets=offsets,
        activation_bias=activation_bias,
        activation_scales=a_scales,
    )
    torch._check(a.dim() == 2, lambda: f"activations must be 2-D [rows, k], got {a.dim()}-D")
    torch._check(a.shape[1] == k, lambda: f"activations have {a.shape[1]} columns but the weight has k={k}")
    # With an activation, the gate and up halves make one output each (moe_gemm's `activation`).
    return a.new_empty((a.shape[0], n // 2 if activation else n), dtype=torch_dtype(g.out))


@torch.library.register_fake("humming::moe_gemm_masked")
def _moe_gemm_masked_fake(
    a, codes, scales, zeros, counts, fmt, layout, n, k, rows_per_expert, instance="", assignments=-1, a_scales=None
):
    g = F.parse_gemm_format(fmt)
    _check_same_device(
        a,
        "activations",
        packed_codes=codes,
        scales=scales,
        zero_points=zeros,
        expert_counts=counts,
        activation_scales=a_scales,
    )
    torch._check(a.dim() == 3, lambda: f"masked activations must be 3-D [experts, capacity, k], got {a.dim()}-D")
    torch._check(a.shape[2] == k, lambda: f"activations have {a.shape[2]} inputs but the weight has k={k}")
    return a.new_empty((a.shape[0], a.shape[1], n), dtype=torch_dtype(g.out))


@torch.library.register_fake("humming::moe_topk")
def _moe_topk_fake(logits, top_k, scoring, renormalize, bias=None, n_group=0, topk_group=0, scaling=1.0):
    torch._check(logits.dim() == 2, lambda: f"router logits must be 2-D [tokens, experts], got {logits.dim()}-D")
    t = logits.shape[0]
    return logits.new_empty((t, top_k), dtype=torch.float32), logits.new_empty((t, top_k), dtype=torch.int32)


@torch.library.register_fake("humming::moe_align")
def _moe_align_fake(ids, num_experts, block_m):
    a = ids.numel()
    # scheduler/moe_route.h, align_capacity: every expert's partial block full of padding.
    capacity = (a + num_experts * (block_m - 1) + block_m - 1) // block_m * block_m
    i32 = lambda n: ids.new_empty((n,), dtype=torch.int32)  # noqa: E731
    return i32(capacity), i32(capacity // block_m), i32(1), i32(a), i32(num_experts), i32(num_experts + 1)


@torch.library.register_fake("humming::moe_permute")
def _moe_permute_fake(x, sorted_ids, top_k):
    torch._check(x.dim() == 2, lambda: f"activations must be 2-D [tokens, hidden], got {x.dim()}-D")
    return x.new_empty((sorted_ids.shape[0], x.shape[1]))


@torch.library.register_fake("humming::moe_combine")
def _moe_combine_fake(y, positions, weights, bias=None, ids=None):
    torch._check(y.dim() == 2, lambda: f"expert outputs must be 2-D [rows, hidden], got {y.dim()}-D")
    return y.new_empty((weights.shape[0], y.shape[1]))


@torch.library.register_fake("humming::moe_activation")
def _moe_activation_fake(h, bias, offsets, activation, limit, alpha, out_type):
    torch._check(h.dim() == 2, lambda: f"gate-up outputs must be 2-D [rows, 2 x intermediate], got {h.dim()}-D")
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[out_type]
    return h.new_empty((h.shape[0], h.shape[1] // 2), dtype=dtype)


def activation_operand(a: torch.Tensor, fast: bool) -> torch.Tensor:
    """``a`` [m, k] as the kernels read it: ``a`` itself where they can, otherwise a contiguous copy
    (so strided, transposed and unaligned activations work, copied only when needed). Every kernel
    reads rows of unit stride along k that do not overlap (row stride >= k); the fast backends
    (``fast``: an sm80 / sm90 instance) also need a 16-byte aligned start and a row stride of a
    multiple of 16 bytes (8 elements of 16 bits, 16 of 8 bits), which the generic backend and the
    CPU reference do not."""
    if a.is_contiguous():  # the usual case: one call, and a data pointer only for a fast kernel
        if not fast or a.data_ptr() % 16 == 0:
            return a
    else:
        m, k = a.shape
        s0, s1 = a.stride()
        ok = (s1 == 1 or k == 1) and (m <= 1 or s0 >= k)
        if ok and (not fast or (a.data_ptr() % 16 == 0 and (m <= 1 or s0 * a.element_size() % 16 == 0))):
            return a
    # clone, not contiguous(): a contiguous tensor at an unaligned address needs a fresh buffer too
    return a.clone(memory_format=torch.contiguous_format)


# What auto_gemm runs once it has an instance: the implementation behind torch.ops.humming.gemm,
# called without boxing the arguments a second time (the dispatcher already ran for auto_gemm);
# HUMMING_EAGER_OPS=1 goes through torch.ops here too, so that torch.profiler lists humming::gemm.
_GEMM = (
    torch.ops.humming.gemm
    if os.environ.get("HUMMING_EAGER_OPS", "0") not in ("", "0")
    else getattr(C, "gemm_eager", None) or torch.ops.humming.gemm
)


# The instance choice is host-side Python that depends on M (a bisect over the table's bounds and
# dictionary caches): Dynamo cannot trace it, and a traced choice would have to guard on M's range
# or fix one instance for every M. Made inside an op, it is opaque to the tracer and happens per call
# with the call's real M, as in eager mode. The choice is the one eager QuantLinear makes: both read
# the layer plan dispatch.layer_plan keeps for the weight.
@torch.library.custom_op(
    "humming::auto_gemm",
    mutates_args=(),
    schema="(Tensor a, Tensor codes, Tensor? scales, Tensor? zeros, Tensor? global_scale, "
    "Tensor? a_scales, Tensor? bias, str fmt, int layout, int n, int k, "
    "str instance='') -> Tensor",
)
def _auto_gemm(a, codes, scales, zeros, global_scale, a_scales, bias, fmt, layout, n, k, instance=""):
    fast = False
    if a.is_cuda:
        from . import dispatch

        if a.dim() == 2 and a.shape[0] == 0:  # no rows: nothing to choose or launch (as QuantLinear)
            return a.new_empty((0, n), dtype=torch_dtype(F.parse_gemm_format(fmt).out))
        if not instance:
            instance = dispatch.layer_plan(fmt, n, k, layout).instance_at(a.shape[0], a.get_device())
        fast = not dispatch.is_generic(instance)
    # A compiled graph may hand over any view (slices, transposes, offsets): made readable here, at
    # run time, where the address is known. (Other shapes: the op's own error message.)
    if a.dim() == 2:
        a = activation_operand(a, fast)
    return _GEMM(a, codes, scales, zeros, global_scale, a_scales, bias, fmt, layout, n, k, instance)


_auto_gemm.register_fake(_gemm_fake)


@torch.library.register_fake("humming::pack_weight")
def _pack_fake(codes, scales, zeros, weight_format, layout):
    w = F.parse_weight_format(weight_format)
    _check_same_device(codes, "codes", scales=scales, zero_points=zeros)
    d = C.packed_dims(str(w), int(layout), int(codes.shape[0]), int(codes.shape[1]))
    packed = codes.new_empty((d["n_pad"], d["words_per_row"]), dtype=torch.int32)
    grid = (d["k_groups"], d["n_groups"])
    s = scales.new_empty(grid) if scales is not None else codes.new_empty((0,))
    z = zeros.new_empty(grid) if zeros is not None else codes.new_empty((0,))
    return packed, s, z


@torch.library.register_fake("humming::unpack_weight")
def _unpack_fake(codes, scales, zeros, weight_format, layout, n, k):
    w = F.parse_weight_format(weight_format)
    _check_same_device(codes, "packed codes", packed_scales=scales, packed_zero_points=zeros)
    d = C.packed_dims(str(w), int(layout), int(n), int(k))
    out_codes = codes.new_empty((n, k), dtype=torch.uint8)
    n_groups = -(-n // d["group_n"])
    k_groups = 1 if w.group_k == 0 else -(-k // w.group_k)
    s = scales.new_empty((n_groups, k_groups)) if w.scale is not None else codes.new_empty((0,), dtype=torch.uint8)
    z = zeros.new_empty((n_groups, k_groups)) if w.zero != "none" else codes.new_empty((0,), dtype=torch.uint8)
    return out_codes, s, z


@torch.library.register_fake("humming::quantize_act")
def _quantize_act_fake(x, act_format):
    f = F.parse_activation_format(act_format)
    m, k = x.shape
    return (
        x.new_empty((m, k), dtype=torch_dtype(f.type)),
        x.new_empty((m, _act_scale_cols(f, k)), dtype=torch.float32),
    )


@torch.library.register_fake("humming::moe_activation_quantize")
def _moe_activation_quantize_fake(h, bias, offsets, activation, limit, alpha, act_format):
    torch._check(h.dim() == 2, lambda: f"gate-up outputs must be 2-D [rows, 2 x intermediate], got {h.dim()}-D")
    f = F.parse_activation_format(act_format)
    m, k = h.shape[0], h.shape[1] // 2
    return (
        h.new_empty((m, k), dtype=torch_dtype(f.type)),
        h.new_empty((m, _act_scale_cols(f, k)), dtype=torch.float32),
    )


@torch.library.register_fake("humming::moe_permute_quantize")
def _moe_permute_quantize_fake(x, sorted_ids, top_k, act_format):
    torch._check(x.dim() == 2, lambda: f"activations must be 2-D [tokens, hidden], got {x.dim()}-D")
    f = F.parse_activation_format(act_format)
    rows, k = sorted_ids.shape[0], x.shape[1]
    return (
        x.new_empty((rows, k), dtype=torch_dtype(f.type)),
        x.new_empty((rows, _act_scale_cols(f, k)), dtype=torch.float32),
    )


def quantize_act(x: torch.Tensor, act_format: str | F.ActivationFormat):
    """Quantize activations [m, k] to ``act_format`` (e4m3/e5m2/i8 with -pt or -g{K}).

    Returns (codes, scales): codes in the format's storage dtype, fp32 scales [m, ceil(k / group)].
    """
    return torch.ops.humming.quantize_act(x, act_format_text(act_format))


def act_format_text(act_format: str | F.ActivationFormat) -> str:
    """The activation format as the ops take it (checked; under torch.compile a text is parsed
    once, at trace time, _act_text)."""
    if torch.compiler.is_compiling() and isinstance(act_format, str):
        return _act_text(act_format)
    return str(F.parse_activation_format(act_format))


# Under torch.compile a format given as text is parsed and printed once, at trace time, by these
# two (their result is a constant of the graph): some torch versions (2.11) cannot trace the
# f-strings of the formats' __str__ over their dataclass fields, and a format is constant anyway.
@torch.compiler.assume_constant_result
def _act_text(text: str) -> str:
    return str(F.parse_activation_format(text))


@torch.compiler.assume_constant_result
def _gemm_texts(text: str) -> str:
    """The GEMM format's text and its weight part's, joined by a space (one constant result)."""
    g = F.parse_gemm_format(text)
    return f"{g} {g.weight}"


def gemm(a: torch.Tensor, packed, fmt: str | F.GemmFormat, *, a_scales=None, bias=None, instance: str = ""):
    """out = a @ W.T for a weight packed by :func:`humming_aot.pack_weight`.

    ``a`` is [m, k] in the activation format's storage dtype (quantize first for e4m3/e5m2/i8;
    pass the scales as ``a_scales``). ``instance`` forces a compiled instance; by default the
    dispatcher chooses (see :func:`humming_aot.dispatch.choose`).
    """
    # Checked first: otherwise a wrong argument surfaces as an AttributeError on one of its fields.
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"activations must be a torch.Tensor [m, k], got {type(a).__name__}")
    # (By its fields: pack imports this module through _ext, so PackedWeight is not importable here.)
    if not isinstance(getattr(packed, "codes", None), torch.Tensor) or not all(
        hasattr(packed, f) for f in ("fmt", "layout", "n", "k")
    ):
        raise TypeError(
            f"the weight must be a PackedWeight (from humming_aot.pack_weight), got {type(packed).__name__}"
        )
    compiling = torch.compiler.is_compiling()
    if compiling and isinstance(fmt, str):
        g_text, w_text = _gemm_texts(fmt).split(" ")
    else:
        g = F.parse_gemm_format(fmt)
        g_text, w_text = str(g), str(g.weight)
    # Compared as text (a format and its string determine each other): under torch.compile with
    # dynamic shapes the packed weight's integers (group sizes among them) may be symbolic, and
    # Dynamo cannot compare dataclasses holding them; the packed weight's text is made once.
    fmt_text = getattr(packed, "fmt_text", None)
    if not isinstance(fmt_text, str):
        fmt_text = str(packed.fmt)
    if w_text != fmt_text:
        raise F.FormatError(
            f"the GEMM format's weight part {w_text} differs from the packed weight's format {fmt_text}"
        )
    if compiling:
        # Traced: the choice is made inside the op at run time (see auto_gemm above).
        op = torch.ops.humming.auto_gemm
    else:
        op = torch.ops.humming.gemm
        fast = False
        if a.is_cuda:
            from . import dispatch

            if a.dim() == 2 and a.shape[0] == 0:  # no rows: nothing to choose or launch
                return a.new_empty((0, packed.n), dtype=torch_dtype(g.out))
            if not instance:
                instance = dispatch.choose(g, packed.n, packed.k, a.shape[0], device=a.device, layout=packed.layout)
            fast = not dispatch.is_generic(instance)
        if a.dim() == 2:  # other shapes: the op's own error message
            a = activation_operand(a, fast)
    return op(
        a,
        packed.codes,
        packed.scales,
        packed.zeros,
        packed.global_scale,
        a_scales,
        bias,
        g_text,
        packed.layout,
        packed.n,
        packed.k,
        instance,
    )
