"""Loads the compiled parts with a helpful error: the torch ops library (torch.ops.humming, built on
torch's stable ABI, so one build serves the torch it was built for and every later one) and the
torch-free pybind11 module humming_aot._C."""

from __future__ import annotations

import ctypes
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_OPS = os.path.join(_HERE, "_torch_ops.so")


def _older(version: str, target: str) -> bool:
    """Whether torch ``version`` (e.g. "2.10.1+cu130") is older than ``target`` ("2.11")."""
    have = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    want = tuple(int(p) for p in target.split("."))
    return have < want


_BROKEN = (
    "the compiled part of humming-aot (humming_aot._C and humming_aot/_torch_ops.so) could not be loaded "
    "({}). Install the package with its extension: pip install --no-build-isolation . "
    "(from a source checkout, with torch installed first), or a prebuilt wheel for your GPU."
)

try:
    from . import _C  # type: ignore[attr-defined]
except ImportError as e:  # pragma: no cover - only on a broken install
    raise ImportError(_BROKEN.format(e)) from e

# Before the ops library: under an older torch its loader would only name a missing symbol.
_target = _C.build_info()["torch_target"]
if _older(str(torch.__version__), _target):
    raise ImportError(
        f"humming-aot's torch ops are built on torch's stable ABI for torch {_target} and later; this is "
        f"torch {torch.__version__}. Install torch>={_target} (pip install 'torch>={_target}')."
    )

try:
    torch.ops.load_library(_OPS)
    _LIB = ctypes.CDLL(_OPS)  # the same handle: the library is loaded by now
    _LIB.humming_warm_workspace.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
    _LIB.humming_warm_workspace.restype = ctypes.c_int
except (OSError, RuntimeError) as e:  # pragma: no cover - only on a broken install
    raise ImportError(_BROKEN.format(e)) from e

C = _C


def _warm_workspace(device: int) -> None:
    """The stream-K scratch of CUDA device ``device``'s current stream, allocated and zeroed now (the
    buffer the GEMM op keeps per stream), so that a first call pays neither the allocation nor the
    fill: _torch_ops.so's humming_warm_workspace, which dispatch's preload calls."""
    error = ctypes.create_string_buffer(1024)
    if _LIB.humming_warm_workspace(int(device), error, len(error)) != 0:
        raise RuntimeError(error.value.decode(errors="replace"))


C.warm_workspace = _warm_workspace


def _eager_module():
    """humming_aot._eager (the GEMM, and quantize_act + GEMM, without the dispatcher), where the
    running torch is the exact one the package was built with (that module takes at::Tensor); None
    elsewhere, and then QuantLinear calls torch.ops.humming.quantize_act and .gemm, the same
    implementation."""
    if C.build_info()["torch_version"] != torch.__version__:
        return None
    try:
        from . import _eager  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - a build without it
        return None
    return _eager


_eager_mod = _eager_module()
if _eager_mod is not None:
    C.gemm_eager = _eager_mod.gemm_eager
    C.quantize_gemm_eager = _eager_mod.quantize_gemm_eager

# The fake (meta) kernels of torch.ops.humming and the op defined in Python (auto_gemm) are
# registered with the compiled ops, whichever module loads them first: without fake kernels
# torch.compile cannot trace a layer whose process never imported humming_aot.ops. ops reads C
# from this module, which is set by now.
from . import ops as _ops  # noqa: E402,F401
