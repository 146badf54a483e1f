"""CMake options (CMakeLists.txt, humming_option): -D, then the environment, then the default; an
option taken from the environment on an earlier configure of the same build tree does not stick."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cmake():
    # The cmake of this interpreter's environment (pip's, recent enough) before the system's.
    local = Path(sys.executable).parent / "cmake"
    exe = str(local) if local.exists() else shutil.which("cmake")
    if exe is None:
        pytest.fail("cmake is not on PATH; the build needs it")
    return exe


def configure(build: Path, env_extra: dict, *defines: str) -> dict:
    """Configure the torch-free core in `build`; returns the options the configure reports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUMMING_")}
    env.update(env_extra)
    p = subprocess.run(
        [
            _cmake(),
            "-S",
            str(ROOT),
            "-B",
            str(build),
            "-DHUMMING_BUILD_TORCH=OFF",
            "-DHUMMING_BUILD_TESTS=OFF",
            "-DHUMMING_CUDA_ARCHS=90a",
            *defines,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"humming: archs=(\S*) profile=(\S*) filter='([^']*)'", p.stdout)
    assert m, p.stdout
    return {"profile": m.group(2), "filter": m.group(3)}


def test_environment_options_do_not_stick_to_the_build_tree(tmp_path):
    build = tmp_path / "b"
    only = "^sm80_mma_dense_a-bf16_w-u4g128-sbf16_c-bf16_t16x64x512_w1x1x8_s3$"
    assert configure(build, {"HUMMING_FILTER": only, "HUMMING_PROFILE": "full"}) == {"profile": "full", "filter": only}
    # The same tree without the variables: back to the defaults (ci, or dev where a GPU is visible).
    assert configure(build, {}) in ({"profile": "ci", "filter": ""}, {"profile": "dev", "filter": ""})
    # -D wins over the environment and stays for later configures, as CMake cache values do.
    assert configure(build, {"HUMMING_FILTER": "zzz"}, "-DHUMMING_FILTER=abc")["filter"] == "abc"
    assert configure(build, {"HUMMING_FILTER": "zzz"})["filter"] == "abc"
    assert configure(build, {})["filter"] == "abc"
