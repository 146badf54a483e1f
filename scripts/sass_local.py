"""The SASS of sm90 instances without the GPU machine: registers, spills and ptxas warnings, each
kernel's instructions by opcode, and its loops (backward branches) with their length and what they
hold. For kernel edits whose effect on the machine code can be checked before device time is spent
(session 43 read the FP8 block tile's stage loop this way: 135 instructions a stage, 64 of them FFMA).

Usage: python3 scripts/sass_local.py REGEX [--arch 90a] [--profile dev+experimental] [--define NAME[=V] ...]
                                     [--loops N] [--keep DIR]

Every instance of the profile whose name matches REGEX (tools/gen_instances.py --filter) is compiled
with this checkout's nvcc (as the build does: -std=c++17 --expt-relaxed-constexpr, -Xptxas -v) and
disassembled with cuobjdump and nvdisasm. This machine's CUDA toolkit lacks both; the script looks
for them on PATH, then in build/sass-venv, and otherwise installs NVIDIA's pip wheels
(nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) there from the package index (a few MB). --define adds
-D flags (A/B of a macro); --loops prints the N longest innermost loops of each kernel (default 4); --keep
keeps the objects and SASS in DIR.
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENV = ROOT / "build" / "sass-venv"


def tool_dir() -> str:
    """A directory holding cuobjdump and nvdisasm (installed into build/sass-venv if needed)."""
    if shutil.which("cuobjdump") and shutil.which("nvdisasm"):
        return os.path.dirname(shutil.which("cuobjdump"))
    found = list(VENV.glob("lib/python*/site-packages/nvidia/cu*/bin"))
    if not (found and (found[0] / "cuobjdump").exists() and (found[0] / "nvdisasm").exists()):
        if not VENV.exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"], check=True)
        found = list(VENV.glob("lib/python*/site-packages/nvidia/cu*/bin"))
    if not found:
        raise SystemExit("cuobjdump / nvdisasm: not on PATH and the pip wheels did not install them")
    return str(found[0])


INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
BRANCH = re.compile(r"BRA(\.\w+)*\s+(?:`?\(?)(0x[0-9a-f]+)")


def kernels(sass: str) -> dict[str, list[tuple[int, str, str]]]:
    """Per function of a cuobjdump -sass listing: (address, opcode, whole text) of each instruction."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    name = None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = INSN.search(line)
        if name and m:
            out[name].append((int(m.group(1), 16), m.group(3), (m.group(3) + m.group(4)).strip()))
    return out


def loops(code: list[tuple[int, str, str]]) -> list[tuple[int, int, collections.Counter]]:
    """Innermost loops as (start, end, opcodes between): backward branches whose span holds no other
    backward branch's. (The retry paths of mbarrier waits, placed at the kernel's end, branch back
    over whole main loops; they hold other loops, so they drop out.)"""
    spans = []
    for addr, op, text in code:
        m = BRANCH.search(text) if op.startswith("BRA") else None
        if m and int(m.group(2), 16) < addr:
            spans.append((int(m.group(2), 16), addr))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    return [(a, b, collections.Counter(o.split(".")[0] for x, o, _ in code if a <= x <= b)) for a, b in inner]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("regex")
    ap.add_argument("--arch", default="90a")
    ap.add_argument("--profile", default="dev+experimental")
    ap.add_argument("--define", action="append", default=[], help="NAME or NAME=VALUE, passed as -D (repeatable)")
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--keep", default=None)
    args = ap.parse_args()
    bin_dir = tool_dir()
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    work = pathlib.Path(args.keep or tempfile.mkdtemp(prefix="sass-"))
    work.mkdir(parents=True, exist_ok=True)
    gen = [sys.executable, str(ROOT / "tools" / "gen_instances.py"), "--arch", args.arch, "--profile", args.profile]
    subprocess.run([*gen, "--filter", args.regex, "--out", str(work / "gen")], check=True, stdout=subprocess.DEVNULL)
    sources = sorted((work / "gen" / "instances").glob("*.cu"))
    if not sources:
        raise SystemExit(f"no instance of profile {args.profile} matches {args.regex}")
    arch = f"-gencode=arch=compute_{args.arch},code=sm_{args.arch}"
    for src in sources:
        obj = work / (src.stem + ".o")
        cmd = ["nvcc", "-std=c++17", "--expt-relaxed-constexpr", arch, f"-I{ROOT / 'include'}", "-Xptxas=-v"]
        cmd += [f"-D{d}" for d in args.define] + ["-c", str(src), "-o", str(obj)]
        built = subprocess.run(cmd, capture_output=True, text=True, env=env)
        print(f"== {src.stem}")
        if built.returncode != 0:
            print(built.stderr[-2000:])
            continue
        for line in built.stderr.splitlines():
            if "warning" in line or ("spill" in line and " 0 bytes spill stores" not in line) or "Used" in line:
                print("  ptxas: " + line.split("ptxas")[-1].strip(" :"))
        sass = subprocess.run(["cuobjdump", "-sass", str(obj)], capture_output=True, text=True, env=env).stdout
        (work / (src.stem + ".sass")).write_text(sass)
        for name, code in kernels(sass).items():
            if not code:
                continue
            ops = collections.Counter(op.split(".")[0] for _, op, _ in code)
            print(f"  {name[:110]}: {len(code)} instructions; " + ", ".join(f"{o} {c}" for o, c in ops.most_common(8)))
            for start, end, body in sorted(loops(code), key=lambda x: -(x[1] - x[0]))[: args.loops]:
                total = sum(body.values())
                print(f"    loop {start:#x}-{end:#x}: {total} instructions; "
                      + ", ".join(f"{o} {c}" for o, c in body.most_common(10)))  # fmt: skip
    print(f"(objects and SASS in {work})")


if __name__ == "__main__":
    main()
