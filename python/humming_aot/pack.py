"""Packing weights for a target layout, and the exact inverse.

A :class:`PackedWeight` records everything a kernel needs to read it: the packed codes, scales
and zero points, the global scale, the format, the logical and padded shapes and the layout id.
Padding of N and K to what the layout needs happens here; outputs keep the logical shape.
"""

from __future__ import annotations

import dataclasses
import operator

import torch

from . import formats as F
from ._ext import C
from .reference import QuantizedWeight

LAYOUTS = {"generic": 1, "sm80": 2, "sm90": 3, "sm90a8": 4}
LAYOUT_NAMES = {v: k for k, v in LAYOUTS.items()}


def layout_id(layout: str | int) -> int:
    if isinstance(layout, str):
        if layout not in LAYOUTS:
            raise ValueError(f"unknown weight layout {layout!r}; layouts: {', '.join(LAYOUTS)}")
        return LAYOUTS[layout]
    ids = ", ".join(f"{v} ({k})" for k, v in LAYOUTS.items())
    # operator.index, not int(): int() would take 2.5 as layout 2 and fail on None without naming it.
    try:
        lid = operator.index(layout)
    except TypeError:
        raise TypeError(
            f"the weight layout must be a name ({', '.join(LAYOUTS)}) or an id ({ids}), got {layout!r}"
        ) from None
    if isinstance(layout, bool) or lid not in LAYOUT_NAMES:
        raise ValueError(f"unknown weight layout id {layout!r}; layout ids: {ids}")
    return lid


@dataclasses.dataclass
class PackedWeight:
    codes: torch.Tensor  # int32 [n_pad, words_per_row]
    scales: torch.Tensor | None  # [k_groups, n_groups] in the scale's storage dtype
    zeros: torch.Tensor | None  # same grid; uint8 (int zero points) or the scale dtype
    global_scale: torch.Tensor | None  # fp32 [1]
    fmt: F.WeightFormat
    n: int
    k: int
    n_pad: int
    k_pad: int
    layout: int
    # The format as text, fixed when the weight is made: under torch.compile the format's integers
    # may be traced as symbols, and some torch versions cannot format those into a string.
    fmt_text: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        self.fmt_text = str(self.fmt)

    @property
    def layout_name(self) -> str:
        return LAYOUT_NAMES[self.layout]

    @property
    def device(self) -> torch.device:
        return self.codes.device

    def to(self, device) -> "PackedWeight":
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return dataclasses.replace(
            self, codes=mv(self.codes), scales=mv(self.scales), zeros=mv(self.zeros), global_scale=mv(self.global_scale)
        )

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for t in (self.codes, self.scales, self.zeros, self.global_scale)
            if t is not None
        )


def pack_weight(codes, scales=None, zeros=None, global_scale=None, fmt=None, *, layout: str | int = "generic"):
    """Pack a quantized weight for ``layout``.

    Either ``pack_weight(q)`` with a :class:`humming_aot.reference.QuantizedWeight`, or
    ``pack_weight(codes, scales, zeros, global_scale, fmt)`` with the same tensors: codes uint8
    bit patterns [n, k], scales and zeros [ceil(n / group_n), ceil(k / group_k)]. Runs on the
    tensors' device (CUDA or CPU).
    """
    if isinstance(codes, QuantizedWeight):
        q = codes
        codes, scales, zeros, global_scale, fmt = q.codes, q.scales, q.zeros, q.global_scale, q.fmt
    if fmt is None:
        raise ValueError("pack_weight needs the weight format (fmt=...), or a QuantizedWeight")
    w = F.parse_weight_format(fmt)
    lid = layout_id(layout)
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"codes must be a torch.Tensor, got {type(codes).__name__}")
    if codes.dim() != 2:
        raise ValueError(f"codes must be 2-D [n, k], got shape {tuple(codes.shape)}")
    # (Codes wider than the format are refused by the op itself, for every caller.)
    if global_scale is not None:
        if not w.global_scale:
            raise ValueError(f"weight format {w} takes no global scale")
        try:  # a number or a one-element tensor; anything else is named here, not by reshape
            gs = torch.as_tensor(global_scale, dtype=torch.float32, device=codes.device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"the global scale must be a number or a one-element tensor, got {global_scale!r}") from e
        if gs.numel() != 1:
            raise ValueError(f"the global scale holds one value, got {gs.numel()} (shape {tuple(gs.shape)})")
        global_scale = gs.reshape(1)
    elif w.global_scale:
        raise ValueError(f"weight format {w} needs a global scale")
    _refuse_nan_scales(scales, w)
    pc, ps, pz = torch.ops.humming.pack_weight(codes, scales, zeros, str(w), lid)
    d = C.packed_dims(str(w), lid, int(codes.shape[0]), int(codes.shape[1]))
    return PackedWeight(
        pc,
        ps if w.scale is not None else None,
        pz if w.zero != "none" else None,
        global_scale,
        w,
        int(codes.shape[0]),
        int(codes.shape[1]),
        d["n_pad"],
        d["k_pad"],
        lid,
    )


def _refuse_nan_scales(scales, w) -> None:
    """ValueError where a scale stored as an 8-bit pattern is NaN: e8m0's byte 0xFF (MXFP4 scales
    are the bytes 0x00 to 0xFE, 2^-127 to 2^127) or e4m3's 0x7F / 0xFF (NVFP4 block scales). The
    kernels would spread the NaN over whole groups of outputs; a checkpoint that holds one is
    refused here, naming the first. (Reads the scales once: a host synchronization for scales on
    a GPU, at packing time.)"""
    name = str(w.scale) if w.scale is not None else ""
    if name not in ("e8m0", "e4m3") or not isinstance(scales, torch.Tensor) or scales.numel() == 0:
        return
    if scales.element_size() != 1:  # not 8-bit patterns (the op names the wrong dtype)
        return
    b = scales.contiguous().view(torch.uint8)  # e8m0 bytes, or e4m3 ones in a float8 tensor
    nan = b == 0xFF if name == "e8m0" else (b & 0x7F) == 0x7F
    if bool(nan.any()):
        where = [int(i) for i in nan.nonzero()[0]]
        raise ValueError(
            f"weight format {w}: its {name} scale at group {where} is NaN (byte 0x{int(b[tuple(where)]):02X}); "
            + (
                "e8m0 scales are the bytes 0x00 to 0xFE (2^-127 to 2^127)"
                if name == "e8m0"
                else "e4m3 scales are finite (every byte but 0x7F and 0xFF)"
            )
        )


def unpack_weight(p: PackedWeight) -> QuantizedWeight:
    """The exact inverse of :func:`pack_weight`: the logical codes, scales and zero points."""
    empty = torch.empty(0, dtype=torch.uint8, device=p.codes.device)
    codes, scales, zeros = torch.ops.humming.unpack_weight(
        p.codes,
        p.scales if p.scales is not None else empty,
        p.zeros if p.zeros is not None else empty,
        str(p.fmt),
        p.layout,
        p.n,
        p.k,
    )
    gs = None if p.global_scale is None else p.global_scale.reshape(())
    return QuantizedWeight(
        p.fmt, codes, scales if p.fmt.scale is not None else None, zeros if p.fmt.zero != "none" else None, gs
    )
