"""Helpers for tests: tolerances derived from the arithmetic, not magic numbers."""

from __future__ import annotations

import torch

# Unit roundoff (half an ulp at 1.0) of each output type.
_UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def gemm_tolerance(
    a_abs: torch.Tensor,
    w_abs: torch.Tensor,
    ref: torch.Tensor,
    out_dtype: torch.dtype,
    operand_dtype: torch.dtype | None = None,
    operand_roundings: int = 1,
) -> torch.Tensor:
    """Per-element bound on |out - ref| for two fp32-accumulated GEMMs of the same operands.

    Two fp32 sums of k products in different orders differ by at most about 2 * k * u32 * sum|a||w|
    (the standard bound for recursive summation, with u32 = 2**-24), and rounding each result to the
    output type adds up to one unit roundoff of the output type on each side. ``a_abs`` [m, k] and
    ``w_abs`` [n, k] are the magnitudes of the dequantized operands; ``ref`` the fp32 reference.
    A tensor-core kernel that rounds each dequantized weight (code - zero) * group scale to its
    operand type (``operand_dtype``) adds at most one unit roundoff of that type per product; one
    that rounds twice (code - zero for a float zero point, then the product with the scale:
    ``operand_roundings=2``) at most (1 + u)^2 - 1 = 2u + u^2.
    """
    k = a_abs.shape[1]
    mag = a_abs.double() @ w_abs.double().T
    u_out = _UNIT_ROUNDOFF[out_dtype]
    u_op = (1 + _UNIT_ROUNDOFF[operand_dtype]) ** operand_roundings - 1 if operand_dtype is not None else 0.0
    return ((2 * k * 2.0**-24 + u_op) * mag + 2 * u_out * ref.double().abs() + 1e-30).float()


def assert_gemm_close(
    out: torch.Tensor,
    ref: torch.Tensor,
    a_deq: torch.Tensor,
    w_deq: torch.Tensor,
    what: str = "",
    operand_dtype: torch.dtype | None = None,
    operand_roundings: int = 1,
):
    """Assert |out - ref| <= gemm_tolerance elementwise, with a message naming the worst element."""
    out_f = out.float().cpu()
    ref_f = ref.float().cpu()
    tol = gemm_tolerance(a_deq.abs().cpu(), w_deq.abs().cpu(), ref_f, out.dtype, operand_dtype, operand_roundings)
    err = (out_f - ref_f).abs()
    bad = ~(err <= tol)
    if bool(bad.any()):
        idx = torch.nonzero(bad)[0].tolist()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements exceed the tolerance; first at {idx}: "
            f"got {out_f[tuple(idx)].item()}, reference {ref_f[tuple(idx)].item()}, tolerance {tol[tuple(idx)].item()}"
        )
