"""Loads the compiled extension (which registers torch.ops.humming) with a helpful error."""

from __future__ import annotations

import torch  # noqa: F401  (libtorch must be loaded before the extension that links it)

try:
    from . import _C  # type: ignore[attr-defined]
except ImportError as e:  # pragma: no cover - only on a broken install
    raise ImportError(
        "humming_aot._C, the compiled part of humming-aot, could not be loaded "
        f"({e}). Install the package with its extension: pip install --no-build-isolation . "
        "(from a source checkout, with torch installed first), or a prebuilt wheel for your GPU."
    ) from e

C = _C

# The fake (meta) kernels of torch.ops.humming and the op defined in Python (auto_gemm) are
# registered with the compiled ops, whichever module loads them first: without fake kernels
# torch.compile cannot trace a layer whose process never imported humming_aot.ops. ops reads C
# from this module, which is set by now.
from . import ops as _ops  # noqa: E402,F401
