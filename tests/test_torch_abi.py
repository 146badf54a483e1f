"""The package's tie to torch: the torch ops library (humming_aot/_torch_ops.so) reaches torch only
through its stable C shim, so one build loads into the torch it was built for and every later one;
humming_aot._C has no torch in it at all; humming_aot._eager, the one part built against torch's C++
API, is used only under the exact torch the package was built with. Checked on the installed
binaries with binutils (nm, readelf), which every build machine with gcc has."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import torch

import humming_aot as ha
from humming_aot import _ext

PKG = os.path.dirname(os.path.abspath(ha.__file__))


def _binary(prefix: str) -> str:
    names = [f for f in os.listdir(PKG) if f.startswith(prefix) and ".so" in f]
    assert len(names) == 1, f"one {prefix}*.so in {PKG}, found {names}"
    return os.path.join(PKG, names[0])


def _undefined(path: str) -> list[str]:
    out = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def _needed(path: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


# Mangled C++ names in torch's own namespaces (at::, c10::, torch::, caffe2::): the unstable ABI.
_TORCH_CXX = re.compile(r"^_Z[A-Z]*N?(K)?(2at|3c10|5torch|6caffe2)")


def test_torch_ops_use_only_the_stable_c_shim():
    path = _binary("_torch_ops")
    syms = _undefined(path)
    cxx = [s for s in syms if _TORCH_CXX.match(s)]
    assert not cxx, f"{path} needs torch C++ symbols, which change between torch releases: {cxx[:10]}"
    # What it does need from torch: the shim's C functions (aoti_torch_*, torch_*).
    assert any(s.startswith("aoti_torch_") for s in syms)


def test_c_module_has_no_torch():
    path = _binary("_C")
    assert not [lib for lib in _needed(path) if "torch" in lib or "c10" in lib], _needed(path)
    torchy = [s for s in _undefined(path) if _TORCH_CXX.match(s) or s.startswith(("aoti_torch_", "torch_"))]
    assert not torchy, torchy


def test_direct_path_only_under_the_build_torch():
    built = ha.registry.build_info()["torch_version"]
    direct = _ext._eager_module()
    if built == torch.__version__:
        assert direct is not None, "the build's own torch takes the GEMM without the dispatcher"
        assert _ext.C.gemm_eager is direct.gemm_eager and _ext.C.quantize_gemm_eager is direct.quantize_gemm_eager
    else:
        assert direct is None, f"humming_aot._eager is built for torch {built}, not {torch.__version__}"
    assert ha.registry.build_info()["torch_abi"].startswith("stable")


def test_an_older_torch_gets_a_clear_import_error():
    """Under a torch older than the one the ops are built for, loading the compiled parts (on first
    use: ``import humming_aot`` itself is lazy) raises an ImportError that names both versions and
    what to install, rather than a missing-symbol error from the loader."""
    target = ha.registry.build_info()["torch_target"]
    major, minor = (int(p) for p in target.split("."))
    code = (
        "import torch\n"
        f"torch.__version__ = '{major}.{minor - 1}.0+cpu'\n"
        "try:\n"
        "    import humming_aot.ops  # the first use that loads the compiled parts\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.startswith("ImportError:"), out
    assert f"torch {target}" in out and f"{major}.{minor - 1}.0" in out and f"torch>={target}" in out, out


def _defined(path: str) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def test_one_libhumming_for_both_modules():
    """The kernels and their registry live once, in libhumming_core.so, which _C and _torch_ops.so
    both load: what _C prepares (prepare_instance loads a kernel's module) is what the ops launch,
    and the wheel holds the kernels once. Neither module defines a libhumming function itself."""
    core = _binary("libhumming_core")
    assert "_ZN7humming14instance_countEv" in _defined(core)
    for prefix in ("_C", "_torch_ops"):
        path = _binary(prefix)
        assert "libhumming_core.so" in _needed(path), f"{path} does not load libhumming_core.so"
        own = [sym for sym in _defined(path) if sym.startswith("_ZN7humming")]
        assert not own, f"{path} defines libhumming functions of its own: {own[:5]}"
    import humming_aot.ops  # noqa: F401  (both modules loaded)

    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libhumming_core" in line}
    assert len(paths) == 1, paths
