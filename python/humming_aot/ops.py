"""torch.ops.humming: the compiled ops, their fake (meta) kernels, and thin Python wrappers.

Ops (schemas in src/torch/binding.cpp):

* ``gemm(a, codes, scales, zeros, global_scale, a_scales, bias, fmt, layout, n, k, instance='')``
* ``pack_weight(codes, scales, zeros, weight_format, layout) -> (codes, scales, zeros)``
* ``unpack_weight(codes, scales, zeros, weight_format, layout, n, k) -> (codes, scales, zeros)``
* ``quantize_act(x, act_format) -> (codes, scales)``

Each has CUDA and CPU kernels (the CPU ones are the reference reading the packed layout) and a
fake kernel here, so they trace under torch.compile and run on meta tensors. Absent outputs of
pack/unpack are empty tensors; the Python API turns them into ``None``.
"""

from __future__ import annotations

import torch

from . import formats as F
from ._ext import C
from .reference import torch_dtype

__all__ = ["gemm", "quantize_act"]


def _act_scale_cols(afmt: F.ActivationFormat, k: int) -> int:
    group = afmt.group_k if afmt.granularity == "group" else k
    return -(-k // group)


@torch.library.register_fake("humming::gemm")
def _gemm_fake(a, codes, scales, zeros, global_scale, a_scales, bias, fmt, layout, n, k, instance=""):
    g = F.parse_gemm_format(fmt)
    torch._check(a.dim() == 2, lambda: f"activations must be 2-D [m, k], got {a.dim()}-D")
    return a.new_empty((a.shape[0], n), dtype=torch_dtype(g.out))


@torch.library.register_fake("humming::pack_weight")
def _pack_fake(codes, scales, zeros, weight_format, layout):
    w = F.parse_weight_format(weight_format)
    d = C.packed_dims(str(w), int(layout), int(codes.shape[0]), int(codes.shape[1]))
    packed = codes.new_empty((d["n_pad"], d["words_per_row"]), dtype=torch.int32)
    grid = (d["k_groups"], d["n_groups"])
    s = scales.new_empty(grid) if scales is not None else codes.new_empty((0,))
    z = zeros.new_empty(grid) if zeros is not None else codes.new_empty((0,))
    return packed, s, z


@torch.library.register_fake("humming::unpack_weight")
def _unpack_fake(codes, scales, zeros, weight_format, layout, n, k):
    w = F.parse_weight_format(weight_format)
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
    return (x.new_empty((m, k), dtype=torch_dtype(f.type)),
            x.new_empty((m, _act_scale_cols(f, k)), dtype=torch.float32))


def quantize_act(x: torch.Tensor, act_format: str | F.ActivationFormat):
    """Quantize activations [m, k] to ``act_format`` (e4m3/e5m2/i8 with -pt or -g{K}).

    Returns (codes, scales): codes in the format's storage dtype, fp32 scales [m, ceil(k / group)].
    """
    return torch.ops.humming.quantize_act(x, str(F.parse_activation_format(act_format)))


def gemm(a: torch.Tensor, packed, fmt: str | F.GemmFormat, *, a_scales=None, bias=None, instance: str = ""):
    """out = a @ W.T for a weight packed by :func:`humming_aot.pack_weight`.

    ``a`` is [m, k] in the activation format's storage dtype (quantize first for e4m3/e5m2/i8;
    pass the scales as ``a_scales``). ``instance`` forces a compiled instance; by default the
    dispatcher chooses (see :func:`humming_aot.dispatch.choose`).
    """
    g = F.parse_gemm_format(fmt)
    if g.weight != packed.fmt:
        raise F.FormatError(f"the GEMM format's weight part {g.weight} differs from the packed weight's format "
                            f"{packed.fmt}")
    if not instance and a.is_cuda:
        from . import dispatch

        instance = dispatch.choose(g, packed.n, packed.k, a.shape[0], device=a.device, layout=packed.layout)
    return torch.ops.humming.gemm(a, packed.codes, packed.scales, packed.zeros, packed.global_scale, a_scales, bias,
                                  str(g), packed.layout, packed.n, packed.k, instance)
