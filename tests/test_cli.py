"""Tests of the ``humming-aot`` command (``python -m humming_aot.cli``), run in subprocesses.

The subprocesses see no GPU (CUDA_VISIBLE_DEVICES is empty), so the same assertions hold on the CPU
CI and on a GPU machine. Expected values come from the installed package's registry and from the
reference quantizer, not from the command's own output.
"""

import math
import os
import re
import subprocess
import sys

import pytest
import torch

from humming_aot import reference as R
from humming_aot import registry


def cli(*args, cwd):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-m", "humming_aot.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


@pytest.fixture(scope="module")
def info_output(tmp_path_factory):
    p = cli("info", cwd=tmp_path_factory.mktemp("cli"))
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_info_lists_the_compiled_architectures(info_output):
    archs = registry.build_info()["archs"]
    assert archs, "the build reports no architecture"
    m = re.search(r"^architectures compiled: (.*) \(profile ([\w+]+)\)$", info_output, re.M)
    assert m, info_output
    assert m.group(1).split(", ") == [f"sm_{a}" for a in archs]
    assert m.group(2) == registry.build_info()["profile"]


def test_info_names_the_family_and_the_installed_version(info_output, monkeypatch):
    """The family line names the family whose architectures the build has (scripts/build_wheel.sh
    builds one wheel per family), "custom" for any other set; a distribution version that differs
    from the build's (a wheel's family label) is printed too."""
    from importlib.metadata import version

    archs = registry.build_info()["archs"]
    want = next((f for f, a in registry.FAMILY_ARCHS.items() if set(a.split(";")) == set(archs)), "custom")
    assert re.search(rf"^family: {want} \(archs {re.escape(';'.join(archs))}\)$", info_output, re.M), info_output
    dist = version("humming-aot")
    assert (f"installed as {dist}" in info_output) == (dist != registry.build_info()["version"])
    for fam, a in [("sm80", ["80", "86", "89"]), ("sm90", ["90a"]), ("", ["80", "90a"])]:
        monkeypatch.setattr(registry, "build_info", lambda a=a: {"archs": a})
        assert registry.build_family() == fam


def test_info_counts_the_instances(info_output):
    insts = registry.instances()
    m = re.search(r"^instances: (\d+)$", info_output, re.M)
    assert m, info_output
    assert int(m.group(1)) == len(insts)
    by_backend = {}
    for i in insts:
        by_backend[i.backend] = by_backend.get(i.backend, 0) + 1
    line = re.search(r"^by backend: (.*)$", info_output, re.M).group(1)
    printed = {b: int(n) for b, n in (part.split() for part in line.split(", "))}
    assert printed == by_backend


def test_info_reports_torch_and_no_gpu(info_output):
    assert re.search(rf"^running torch {re.escape(torch.__version__)} ", info_output, re.M), info_output
    assert re.search(r"^GPU: none visible", info_output, re.M), info_output


def demo_error(stdout):
    m = re.search(r"relative error against the float layer: ([0-9.]+)", stdout)
    assert m, stdout
    return float(m.group(1))


def test_demo_on_cpu_error_is_the_quantization_error(tmp_path):
    # The demo quantizes a k -> n nn.Linear and compares x @ Wq.T + b with x @ W.T + b for random normal
    # x. With x independent of the weight error E, ||x E.T|| / ||x W.T|| estimates ||E|| / ||W|| (the
    # bias adds about 1/k to the reference's energy). So the bound is the weight's relative
    # quantization error, measured here with the reference quantizer on an independent weight drawn
    # like nn.Linear's (uniform in +-1/sqrt(k)), within sampling spread (m*n = 256 outputs: a few %),
    # plus bf16 rounding of x and of the output (relative 2**-9 each).
    # i4g128-sbf16 is used instead of the demo's default u4g128-sbf16 because reference.quantize_weight
    # does not yet implement the implied zero point 2**(bits-1) of unsigned codes without -zi/-zf.
    fmt, m, n, k = "i4g128-sbf16", 4, 64, 256
    p = cli("demo", "--cpu", "--format", fmt, "--m", str(m), "--n", str(n), "--k", str(k), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "ran on: CPU reference path" in p.stdout
    assert re.search(r"^instance: cpu-reference$", p.stdout, re.M)
    assert f"QuantLinear {k} -> {n}, weight {fmt}" in p.stdout

    g = torch.Generator().manual_seed(1234)
    w = (torch.rand(n, k, generator=g) * 2 - 1) / math.sqrt(k)
    wq = R.dequantize_weight(R.quantize_weight(w, fmt))
    expected = ((wq - w).norm() / w.norm()).item()
    # Closed form for comparison: uniform weights, scale amax / 7, rounding error uniform in a step:
    # sqrt((1/12) / 49 / (1/3)) = 0.071.
    assert 0.05 < expected < 0.09

    err = demo_error(p.stdout)
    assert 0.5 * expected < err < 1.5 * expected + 2 * 2.0**-9, (err, expected)


def run_main(args, capsys):
    """cli.main in this process (the subprocess tests above cover the real exit code path)."""
    from humming_aot import cli as cli_mod

    with torch.random.fork_rng():  # the demo seeds torch's global generator
        rc = cli_mod.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_demo_with_quantized_activations(capsys):
    rc, out, err = run_main(
        ["demo", "--cpu", "--format", "e4m3gc-sf32", "--act", "e4m3-pt", "--m", "4", "--n", "64", "--k", "256"], capsys
    )
    assert rc == 0, err
    assert "activations e4m3-pt" in out
    # e4m3 keeps 3 mantissa bits: relative rounding error at most 2**-4 per element, about 2**-4/sqrt(3)
    # in rms for each of the two operands.
    assert 0 < demo_error(out) < 2 * 2.0**-4


def test_demo_bad_format_exits_2_naming_the_grammar(tmp_path):
    p = cli("demo", "--cpu", "--m", "2", "--n", "64", "--k", "256", "--format", "foo", cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert re.search(
        r"^humming-aot demo: cannot parse weight format 'foo'; weight formats look like "
        r"\{code\}\[\{granularity\}-s\{scale\}\]\[-z\{i\|f\}\]\[-gs\]",
        p.stderr,
        re.M,
    ), p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--format", "u4g100-sbf16"), r"the K group size is 100; group sizes are powers of two"),
        (("--format", "i4g128-sbf16-zi"), r"zero points are for unsigned integer codes"),
        (("--act", "e4m3"), r"quantized activations \(e4m3\) need scales"),
    ],
)
def test_demo_bad_formats_return_2_naming_the_problem(capsys, args, message):
    rc, out, err = run_main(["demo", "--cpu", "--m", "2", "--n", "64", "--k", "256", *args], capsys)
    assert rc == 2
    assert re.search(r"^humming-aot demo: ", err, re.M), err
    assert re.search(message, err), err


def test_no_command_is_a_usage_error(tmp_path):
    p = cli(cwd=tmp_path)
    assert p.returncode == 2
    assert "info" in p.stderr and "demo" in p.stderr


def test_cmake_dir_points_at_the_installed_cpp_package(tmp_path):
    """The installed package ships the C++ package (headers, libhumming, CMake config) under
    humming_aot/cpp/; --cmake-dir prints the config's folder, whose targets file names them."""
    import pathlib

    p = cli("--cmake-dir", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = pathlib.Path(p.stdout.strip())
    assert (d / "humming-config.cmake").is_file() and (d / "humming-config-version.cmake").is_file()
    root = d.parents[2]  # .../humming_aot/cpp/<lib>/cmake/humming -> .../humming_aot/cpp
    assert root.name == "cpp" and root.parent.name == "humming_aot"
    assert (root / "include" / "humming" / "humming.h").is_file()
    assert (root / "include" / "humming" / "kernel" / "sm90_a8_dense.cuh").is_file()
    assert any((root / lib / "libhumming.a").is_file() for lib in ("lib", "lib64"))
    targets = "".join(f.read_text() for f in d.glob("humming-targets*.cmake"))
    assert "humming::humming" in targets and "humming_aot/cpp/include" in targets
