"""The ``humming-aot`` command: ``info``, ``demo``, ``bench`` and ``convert``."""

from __future__ import annotations

import argparse
import sys


def cmake_dir() -> str:
    """The folder of the installed C++ package's CMake config (humming-config.cmake), for
    ``find_package(humming)`` with ``-Dhumming_DIR=...`` or ``CMAKE_PREFIX_PATH``: the wheel ships
    headers, libhumming and the config under ``humming_aot/cpp/``. FileNotFoundError where this
    installation has none (built with HUMMING_INSTALL_CPP=OFF)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parent / "cpp"
    for lib in ("lib", "lib64"):
        d = root / lib / "cmake" / "humming"
        if (d / "humming-config.cmake").is_file():
            return str(d)
    raise FileNotFoundError(
        f"this installation of humming_aot has no C++ package under {root} (it was built with "
        "HUMMING_INSTALL_CPP=OFF); rebuild without it, or install libhumming with cmake --install"
    )


def _info(args) -> int:
    import torch

    from . import _ext, registry

    info = registry.build_info()
    print(f"humming-aot {info['version']}")
    try:  # the installed distribution's version: a wheel of scripts/build_wheel.sh labels its family
        from importlib.metadata import PackageNotFoundError, version

        dist = version("humming-aot")
    except PackageNotFoundError:
        dist = None
    fam = registry.build_family()
    if dist is not None and dist != info["version"]:
        print(f"installed as {dist}")
    print(f"family: {fam or 'custom'} (archs {';'.join(info['archs'])})")
    print(f"architectures compiled: {', '.join('sm_' + a for a in info['archs'])} (profile {info['profile']})")
    print(f"instances: {info['instance_count']}")
    backends: dict[str, int] = {}
    for inst in registry.instances():
        backends[inst.backend] = backends.get(inst.backend, 0) + 1
    print("by backend: " + ", ".join(f"{b} {n}" for b, n in sorted(backends.items())))
    cv = info["cuda_version"]
    print(f"built with CUDA {cv // 1000}.{cv % 1000 // 10} and torch {info['torch_version']}")
    print(f"running torch {torch.__version__} (CUDA {torch.version.cuda})")
    direct = getattr(_ext.C, "gemm_eager", None) is not None
    print(
        f"torch ops: {info['torch_abi']} ABI; eager calls "
        + (
            "skip the dispatcher"
            if direct
            else f"go through torch.ops (the direct path is for torch {info['torch_version']})"
        )
    )
    if torch.cuda.is_available():
        cc = registry.device_cc()
        ok, why = registry.device_covered(cc)
        print(f"GPU: {torch.cuda.get_device_name()} (sm_{cc}): {'covered' if ok else 'NOT covered'}: {why}")
    else:
        print("GPU: none visible; ops run on the CPU reference path")
    return 0


def _demo(args) -> int:
    import torch

    from .layers import QuantLinear

    torch.manual_seed(0)
    use_gpu = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if use_gpu else "cpu")
    dt = torch.bfloat16
    linear = torch.nn.Linear(args.k, args.n, bias=True, dtype=torch.float32)
    layer = QuantLinear.from_linear(linear, args.format, act_format=args.act, device=device)
    x = torch.randn(args.m, args.k, dtype=torch.float32)
    with torch.no_grad():
        ref = linear(x)
        y = layer(x.to(device=device, dtype=dt)).float().cpu()
    rel = ((y - ref).norm() / ref.norm()).item()
    where = "GPU" if use_gpu else "CPU reference path"
    print(f"QuantLinear {args.k} -> {args.n}, weight {layer.fmt.weight}, activations {layer.fmt.act}, m={args.m}")
    print(f"ran on: {where}" + (f" ({torch.cuda.get_device_name()})" if use_gpu else ""))
    print(f"instance: {layer.instance_for(args.m, device)}")
    print(f"relative error against the float layer: {rel:.4f} (quantization error of {layer.fmt.weight})")
    return 0


# --arch names the GPU generation; each maps to the weight layout its kernels read (pack.LAYOUTS).
_ARCH_LAYOUTS = {"sm90": "sm90", "sm80": "sm80", "generic": "generic"}


def _convert(args) -> int:
    from .loading import iter_quantized
    from .packed_checkpoint import is_packed_checkpoint, save_packed

    layout = _ARCH_LAYOUTS[args.arch]
    if is_packed_checkpoint(args.model_dir):
        raise ValueError(f"{args.model_dir} is already a packed checkpoint; convert its source checkpoint")
    # iter_quantized: one unpacked layer in memory at a time; packing runs on the CPU
    manifest = save_packed(
        iter_quantized(args.model_dir, progress=not args.quiet),
        args.out_dir,
        layout=layout,
        max_shard_bytes=int(args.max_shard_gb * (1 << 30)),
        progress=False,
    )
    print(
        f"packed {len(manifest['layers'])} layers for layout {manifest['layout_name']} "
        f"(id {manifest['layout']}) into {args.out_dir} ({len(manifest['files'])} file(s))"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "bench":
        # The benchmark has many options of its own; it parses them itself (humming-aot bench --help).
        from . import bench

        return bench.main(argv[1:])
    ap = argparse.ArgumentParser(prog="humming-aot", description="Quantized GEMM kernels, compiled ahead of time")
    ap.add_argument(
        "--cmake-dir",
        action="store_true",
        help="print the folder of the C++ package's CMake config (find_package(humming)) and exit",
    )
    sub = ap.add_subparsers(dest="cmd")
    # Listed here for --help only; main() hands `bench` and its arguments to humming_aot.bench above.
    sub.add_parser(
        "bench",
        add_help=False,
        help="time GEMMs against cuBLAS, torch int4, FP8 and humming-kernels on this GPU (humming-aot bench --help)",
    )
    sub.add_parser("info", help="architectures, instance count, versions, and whether this GPU is covered")
    d = sub.add_parser("demo", help="quantize a layer, run it, print the error against the float result")
    d.add_argument("--format", default="u4g128-sbf16", help="weight format (default u4g128-sbf16)")
    d.add_argument("--act", default="bf16", help="activation format (default bf16)")
    d.add_argument("--m", type=int, default=16)
    d.add_argument("--n", type=int, default=512)
    d.add_argument("--k", type=int, default=1024)
    d.add_argument("--cpu", action="store_true", help="use the CPU reference path even with a GPU")
    c = sub.add_parser(
        "convert",
        help="import a quantized checkpoint (GPTQ, AWQ, compressed-tensors, ...) and write it packed for one target",
    )
    c.add_argument("model_dir", help="checkpoint directory (config.json with quantization_config, safetensors)")
    c.add_argument("out_dir", help="where the packed checkpoint goes (created)")
    c.add_argument("--arch", required=True, choices=sorted(_ARCH_LAYOUTS), help="target GPU generation (its layout)")
    c.add_argument("--max-shard-gb", type=float, default=4.0, help="largest output file, in GiB (default 4)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.cmake_dir:
        try:
            print(cmake_dir())
        except FileNotFoundError as e:
            print(f"humming-aot --cmake-dir: {e}", file=sys.stderr)
            return 2
        return 0
    if args.cmd is None:
        ap.error("give a command (info, demo, bench, convert) or --cmake-dir")
    from .formats import FormatError

    try:
        return {"info": _info, "demo": _demo, "convert": _convert}[args.cmd](args)
    except (FormatError, ValueError, TypeError, FileNotFoundError) as e:
        print(f"humming-aot {args.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
