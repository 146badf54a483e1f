"""Tests of the instance generator (tools/gen_instances.py).

The generator runs at configure time on build machines that may not have torch, so every run here
happens in a subprocess whose ``import torch`` fails (a stub ``torch`` package that raises ImportError
is put first on PYTHONPATH). Expected values come from tools/matrix/generic.json, from
humming_aot.formats and from Python's ``re``, never from the generator's own output.
"""

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from humming_aot import formats as F

ROOT = Path(__file__).resolve().parent.parent
GEN = ROOT / "tools" / "gen_instances.py"
MATRIX = json.loads((ROOT / "tools" / "matrix" / "generic.json").read_text())
PROFILES = ("ci", "dev", "full")

NAME_RE = re.compile(r"generic_dense_a-(?P<act>[^_]+)_w-(?P<weight>[^_]+)_c-(?P<out>[^_]+)")
WEIGHT_RE = re.compile(r"(?P<code>[iu]\d+|e\d+m\d+)(?:-s(?P<scale>[a-z0-9]+))?(?:-z(?P<zero>[if]))?")
ZERO_OF_SUFFIX = {None: "none", "i": "int", "f": "float"}


@pytest.fixture(scope="module")
def no_torch_env(tmp_path_factory):
    """An environment in which ``import torch`` raises ImportError."""
    stub = tmp_path_factory.mktemp("no_torch")
    (stub / "torch").mkdir()
    (stub / "torch" / "__init__.py").write_text(
        'raise ImportError("torch is blocked: the generator must not need it")\n'
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(stub)
    env.pop("PYTHONHOME", None)
    return env


@pytest.fixture(scope="module")
def gen(no_torch_env):
    def run(*args, check=True):
        p = subprocess.run(
            [sys.executable, str(GEN), *args], capture_output=True, text=True, env=no_torch_env, timeout=120
        )
        if check:
            assert p.returncode == 0, f"gen_instances {args} failed ({p.returncode}):\n{p.stderr}"
        return p

    return run


@pytest.fixture(scope="module")
def all_names(gen):
    """profile -> every instance name for --arch 90a, all backends."""
    return {prof: gen("--arch", "90a", "--profile", prof, "--list").stdout.splitlines() for prof in PROFILES}


@pytest.fixture(scope="module")
def listing(all_names):
    """profile -> names of the generic backend (the matrix in generic.json)."""
    return {prof: [n for n in names if n.startswith("generic_")] for prof, names in all_names.items()}


def parse_name(name):
    """(act, code, scale, zero, out) of an instance name; scale is "none" for unscaled codes."""
    m = NAME_RE.fullmatch(name)
    assert m, f"{name!r} does not look like generic_dense_a-{{act}}_w-{{weight}}_c-{{out}}"
    w = WEIGHT_RE.fullmatch(m.group("weight"))
    assert w, f"weight part {m.group('weight')!r} of {name!r} is not code[-s{{scale}}][-zi|-zf]"
    return (
        m.group("act"),
        w.group("code"),
        w.group("scale") or "none",
        ZERO_OF_SUFFIX[w.group("zero")],
        m.group("out"),
    )


# ---- torch is not needed ------------------------------------------------------------------------


def test_stub_really_blocks_torch(no_torch_env):
    p = subprocess.run(
        [sys.executable, "-c", "import torch"], capture_output=True, text=True, env=no_torch_env, timeout=60
    )
    assert p.returncode != 0
    assert "torch is blocked" in p.stderr


def test_list_runs_without_torch(listing):
    # The fixture ran every profile with torch blocked; each produced names.
    for prof in PROFILES:
        assert listing[prof], f"profile {prof} produced no instances"


# ---- determinism, counting, profiles ------------------------------------------------------------


def test_full_list_is_deterministic_sorted_and_unique(gen, all_names):
    again = gen("--arch", "90a", "--profile", "full", "--list").stdout.splitlines()
    names = all_names["full"]
    assert again == names
    assert names == sorted(names)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("profile", PROFILES)
def test_count_equals_number_of_listed_names(gen, all_names, profile):
    out = gen("--arch", "90a", "--profile", profile, "--count").stdout.strip()
    assert int(out) == len(all_names[profile])


def test_profiles_nest(all_names):
    ci, dev, full = (set(all_names[p]) for p in PROFILES)
    assert ci <= dev <= full
    assert len(ci) < len(dev) < len(full)


def test_default_profile_is_dev(gen, all_names):
    assert gen("--arch", "90a", "--list").stdout.splitlines() == all_names["dev"]


def test_ci_profile_is_the_product_of_the_ci_entries(listing):
    # The ci entries have no extra filters, so the ci set is their cross products minus what the
    # format rules reject (zero points on non-unsigned codes), recomputed here.
    expected = set()
    for e in MATRIX["entries"]:
        if e["profile"] != "ci":
            continue
        for act, code, scale, zero, out in itertools.product(e["act"], e["code"], e["scale"], e["zero"], e["out"]):
            if zero != "none" and not code.startswith("u"):
                continue
            weight = code + ("" if scale == "none" else f"-s{scale}") + {"none": "", "int": "-zi", "float": "-zf"}[zero]
            expected.add(f"generic_dense_a-{act}_w-{weight}_c-{out}")
    assert set(listing["ci"]) == expected


# ---- names --------------------------------------------------------------------------------------


def test_every_name_parses_with_formats(listing):
    for name in listing["full"]:
        act, code, scale, zero, out = parse_name(name)
        assert str(F.dtype(act)) in F.ACT_TYPES, name
        assert str(F.dtype(out)) in F.OUT_TYPES, name
        assert F.dtype(code).bits <= 8, name
        if scale != "none":
            assert str(F.dtype(scale)) in F.SCALE_TYPES, name
        # With a representative granularity the name is a GEMM format the format rules accept.
        quantized_act = act in ("e4m3", "e5m2", "i8")
        weight = code if scale == "none" else f"{code}g128-s{scale}"
        weight += {"none": "", "int": "-zi", "float": "-zf"}[zero]
        g = F.parse_gemm_format(f"a-{act}{'-pt' if quantized_act else ''}_w-{weight}_c-{out}")
        assert str(g.weight.code) == code and str(g.out) == out


def test_no_zero_point_on_signed_codes(listing):
    for name in listing["full"]:
        _, code, _, zero, _ = parse_name(name)
        if zero != "none":
            assert F.dtype(code).kind == F.KIND_UINT, f"{name} has a zero point on signed code {code}"


@pytest.mark.parametrize("axis", ["act", "code", "scale", "zero", "out"])
def test_every_matrix_value_appears_in_full(listing, axis):
    listed = set()
    for e in MATRIX["entries"]:
        listed.update(e[axis])
    position = ("act", "code", "scale", "zero", "out").index(axis)
    seen = {parse_name(n)[position] for n in listing["full"]}
    assert listed <= seen, f"{axis} values of generic.json missing from the full profile: {sorted(listed - seen)}"
    assert seen <= listed, f"{axis} values not in generic.json: {sorted(seen - listed)}"


def test_names_do_not_depend_on_a_single_matrix_arch(gen, all_names):
    # Every arch both matrices list gets the same instances (archs are compile targets, not keys);
    # the sm90 backend compiles for 90a only, and the sm80 family's FP8 activation kernels for 89
    # and newer (mma.sync on FP8 needs sm_89).
    fp8_sm80 = re.compile(r"sm80_mma_dense_a-(e4m3|e5m2)-")
    without_sm90 = [n for n in all_names["ci"] if not n.startswith("sm90_") and not fp8_sm80.match(n)]
    assert gen("--arch", "80", "--profile", "ci", "--list").stdout.splitlines() == without_sm90
    assert gen("--arch", "sm_80;90a", "--profile", "ci", "--list").stdout.splitlines() == all_names["ci"]


# ---- filter -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", [r"_w-u4", r"e2m1.*_c-f16$", r"^generic_dense_a-i8_"])
def test_filter_keeps_only_matching_names(gen, all_names, pattern):
    got = gen("--arch", "90a", "--profile", "full", "--filter", pattern, "--list").stdout.splitlines()
    expected = [n for n in all_names["full"] if re.search(pattern, n)]
    assert expected, f"pattern {pattern} should match something in the full profile"
    assert got == expected


def test_filter_matching_nothing_lists_nothing(gen):
    p = gen("--arch", "90a", "--profile", "full", "--filter", "no-such-instance", "--count")
    assert int(p.stdout) == 0


# ---- errors -------------------------------------------------------------------------------------


def test_bad_arch_is_refused(gen):
    p = gen("--arch", "sm_42", "--list", check=False)
    assert p.returncode != 0
    assert re.search(r"unknown GPU architecture '42'", p.stderr)
    assert "90a" in p.stderr  # lists the known ones
    assert p.stdout == ""


def test_empty_arch_is_refused(gen):
    p = gen("--arch", "", "--list", check=False)
    assert p.returncode != 0
    assert "no architecture given" in p.stderr


def test_bad_profile_is_refused(gen):
    p = gen("--arch", "90a", "--profile", "huge", "--list", check=False)
    assert p.returncode != 0
    assert "unknown profile 'huge'" in p.stderr
    assert "ci, dev, full" in p.stderr


def test_bad_regex_is_refused(gen):
    p = gen("--arch", "90a", "--filter", "(", "--list", check=False)
    assert p.returncode != 0
    assert "--filter is not a valid regular expression" in p.stderr


def test_nothing_to_do_is_refused(gen):
    p = gen("--arch", "90a", check=False)
    assert p.returncode != 0
    assert "--out" in p.stderr


# ---- writing ------------------------------------------------------------------------------------


def _snapshot(out: Path) -> dict:
    return {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def test_list_writes_nothing(gen, tmp_path):
    out = tmp_path / "build"
    gen("--arch", "90a", "--profile", "ci", "--list", "--out", str(out))
    gen("--arch", "90a", "--profile", "ci", "--count", "--out", str(out))
    assert not out.exists()


def test_out_writes_incrementally_and_prunes(gen, all_names, tmp_path):
    out = tmp_path / "build"
    args = ("--arch", "80;90a", "--profile", "dev", "--out", str(out))
    names = all_names["dev"]

    first = gen(*args)
    files = _snapshot(out)
    assert set(files) == {f"instances/{n}.cu" for n in names} | {"registry.cpp", "instances.cmake"}
    assert f"{len(names) + 2} files written" in first.stderr
    for n in names:
        text = (out / "instances" / f"{n}.cu").read_text()
        # The kernel's header: backend_dense.cuh, the 8-bit activation kernels backend_a8_dense.cuh.
        a8 = A8_RE.match(n) or SM80_A8_RE.fullmatch(n)
        header = f"{n.split('_')[0]}_a8_dense.cuh" if a8 else f"{n.split('_')[0]}_dense.cuh"
        assert n in text and header in text

    registry = (out / "registry.cpp").read_text()
    quoted = re.findall(r'\{"((?:generic|sm80|sm90)_[^"]*)"', registry)
    assert sorted(quoted) == names
    for n in names:
        assert registry.count(f'"{n}"') == 1, n
    assert f"kInstanceCount = {len(names)};" in registry
    assert 'kBuildArchs[] = "80;90a"' in registry
    assert 'kBuildProfile[] = "dev"' in registry

    cmake = (out / "instances.cmake").read_text()
    props = [line for line in cmake.splitlines() if line.startswith("set_source_files_properties(")]
    assert len(props) == len(names)
    for n in names:
        line = next(p for p in props if f"/instances/{n}.cu\"" in p)
        for arch in ("80", "90a"):
            # The sm90 backend's machine code is for sm_90a alone (wgmma, setmaxnreg), the sm80
            # family's FP8 activation kernels for sm_89 and newer.
            fp8_sm80 = SM80_A8_RE.fullmatch(n) and "_a-i8-" not in n
            expected = arch == "90a" or not (n.startswith("sm90_") or fp8_sm80)
            assert (f"-gencode=arch=compute_{arch},code=sm_{arch}" in line) == expected, (n, arch)
    sources = re.search(r"set\(HUMMING_INSTANCE_SOURCES\n(.*?)\n\)", cmake, re.S).group(1).split()
    assert sorted(Path(s.strip('"')).name for s in sources) == sorted(f"{n}.cu" for n in names)

    # Same inputs again: nothing is rewritten.
    second = gen(*args)
    assert "0 files written" in second.stderr
    assert _snapshot(out) == files

    # A narrower filter deletes the instance files that left the set.
    pattern = r"_w-u4-"
    kept = [n for n in names if re.search(pattern, n)]
    assert 0 < len(kept) < len(names)
    gen(*args, "--filter", pattern)
    left = sorted(p.stem for p in (out / "instances").glob("*.cu"))
    assert left == kept
    registry = (out / "registry.cpp").read_text()
    assert sorted(re.findall(r'\{"(generic_[^"]*)"', registry)) == kept
    for n in kept:  # untouched instance files keep their mtime
        assert (out / "instances" / f"{n}.cu").stat().st_mtime_ns == files[f"instances/{n}.cu"]


def test_gencode_flags_follow_the_requested_archs(gen, listing, tmp_path):
    out = tmp_path / "build"
    gen("--arch", "86", "--profile", "ci", "--out", str(out))
    cmake = (out / "instances.cmake").read_text()
    flags = set(re.findall(r"-gencode=arch=compute_(\w+),code=sm_(\w+)", cmake))
    assert flags == {("86", "86")}


def test_installed_build_matches_the_generator(gen):
    # The installed extension was built from this generator's output for its archs and profile.
    from humming_aot import registry

    info = registry.build_info()
    expected = gen("--arch", ";".join(info["archs"]), "--profile", info["profile"], "--list").stdout.splitlines()
    assert sorted(i.name for i in registry.instances()) == expected
    assert info["instance_count"] == len(expected)


# ---- the sm80 backend ---------------------------------------------------------------------------

SM80 = json.loads((ROOT / "tools" / "matrix" / "sm80.json").read_text())
SM80_RE = re.compile(
    r"sm80_mma_dense_a-(?P<act>[^_]+)_w-(?P<weight>[^_]+)_c-(?P<out>[^_]+)"
    r"_t(?P<bm>\d+)x(?P<bn>\d+)x(?P<bk>\d+)_w(?P<wm>\d+)x(?P<wn>\d+)x(?P<wk>\d+)_s(?P<st>\d+)"
)


def test_sm80_names_spell_format_and_tile(all_names):
    # The weight-only kernel's instances (the 8-bit activation ones have their own test below).
    names = [n for n in all_names["full"] if n.startswith("sm80_") and not SM80_A8_RE.fullmatch(n)]
    assert names, "the full profile has sm80 instances"
    tiles = {
        (t["bm"], 64 * t["warps"][1], t["warp_k"] * t["warps"][2], *t["warps"], t["stages"])
        for t in SM80["tiles"].values()
    }
    seen = {"act": set(), "code": set(), "zero": set(), "group": set(), "tile": set()}
    for name in names:
        m = SM80_RE.fullmatch(name)
        assert m, name
        g = F.parse_gemm_format(f"a-{m['act']}_w-{m['weight']}_c-{m['out']}")
        assert str(g.weight.scale) == str(g.act.type) == str(g.out), name  # scales and output in the operand type
        tile = tuple(int(m[k]) for k in ("bm", "bn", "bk", "wm", "wn", "wk", "st"))
        assert tile in tiles, name
        seen["act"].add(str(g.act.type))
        seen["code"].add(str(g.weight.code))
        seen["zero"].add(g.weight.zero)
        seen["group"].add(g.weight.group_k)
        seen["tile"].add(tile)
    want = {"act": set(), "code": set(), "zero": set(), "group": set()}
    for e in SM80["entries"]:
        for axis in want:
            want[axis] |= set(e[axis])
    for axis in want:
        assert want[axis] <= seen[axis], (axis, want[axis] - seen[axis])
    assert seen["tile"] == tiles


SM80_A8 = json.loads((ROOT / "tools" / "matrix" / "sm80_a8.json").read_text())
SM80_A8_RE = re.compile(
    r"sm80_mma_dense_a-(?P<act>e4m3|e5m2|i8)-(?P<agran>pt|g128)_w-(?P<code>e4m3|i8|u4|i4|e2m1)(?P<gran>gc|g128n128|g128|g32)"
    r"-s(?P<scale>f32|bf16|f16|e8m0)_c-(?P<out>bf16|f16|f32)"
    r"_t(?P<bm>\d+)x(?P<bn>\d+)x(?P<bk>\d+)_w(?P<wm>\d)x(?P<wn>\d)x(?P<wk>\d)_s(?P<st>\d)"
)


def test_sm80_a8_instances_keys_archs_and_entry_points(gen, tmp_path):
    """The sm80 family's 8-bit activation instances (kernel/sm80_a8_dense.cuh): FP8 activations
    (e4m3 / e5m2 x e4m3; e4m3 x u4 / i4 / e2m1) only with machine code for sm_89 and newer (mma.sync
    on FP8 needs it), i8 x i8 / u4 / i4 for every arch; per-token activation scales x per-channel
    weight scales, or (4-bit codes with FP8) per channel and 128 inputs, or (e4m3 codes) 128 x 128
    fp32 weight blocks x activation scales per token and 128 inputs, or (MXFP4) e2m1 codes with
    e8m0 scales per 32 inputs, on the generic layout;
    tiles of the matrix, each stage at most 128 inputs per warp (one FP8 promotion) and, with
    4-bit codes, 128 inputs a stage (rows of 64 bytes, one group a stage); their shared memory (with
    group scales, a row of scales a stage) within the 99 KiB of sm_86 / sm_89; in every profile
    since their GPU tests passed (H200, as sm_90a code): ci compiles FP8, integer, 4-bit, block and
    MXFP4 translation units, which call the kernel's entry points, and no entry is experimental."""
    gen_mod = _load_generator()
    archs = ["80", "86", "89", "90a"]
    insts = [i for i in gen_mod.enumerate_instances(archs, "full+experimental") if SM80_A8_RE.fullmatch(i.name)]
    tiles = {
        (t["bm"], 64 * t["warps"][1], t["warp_k"] * t["warps"][2], *t["warps"], t["stages"]): t["warp_k"]
        for t in SM80_A8["tiles"].values()
    }
    assert {i.name.split("_t")[0] for i in insts} >= {
        "sm80_mma_dense_a-e4m3-pt_w-e4m3gc-sf32_c-bf16",
        "sm80_mma_dense_a-e5m2-pt_w-e4m3gc-sf32_c-bf16",
        "sm80_mma_dense_a-i8-pt_w-i8gc-sbf16_c-bf16",
        "sm80_mma_dense_a-e4m3-pt_w-u4g128-sbf16_c-bf16",
        "sm80_mma_dense_a-e4m3-pt_w-e2m1gc-sbf16_c-bf16",
        "sm80_mma_dense_a-i8-pt_w-i4gc-sbf16_c-bf16",
        "sm80_mma_dense_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16",
        "sm80_mma_dense_a-e4m3-pt_w-e2m1g32-se8m0_c-bf16",
    }
    allowed = {"e4m3": {"e4m3", "u4", "i4", "e2m1"}, "e5m2": {"e4m3"}, "i8": {"i8", "u4", "i4"}}
    for i in insts:
        m = SM80_A8_RE.fullmatch(i.name)
        fp8, four = m["act"] != "i8", m["code"] in ("u4", "i4", "e2m1")
        group = {"gc": 0, "g32": 32}.get(m["gran"], 128)
        blocks = m["gran"] == "g128n128"
        # MXFP4 (e2m1, e8m0 scales per 32 inputs) is the only group of 32 and the only e8m0.
        assert (group == 32) == (m["scale"] == "e8m0") and (group != 32 or m["code"] == "e2m1"), i.name
        assert m["code"] in allowed[m["act"]], i.name
        assert not group or (fp8 and (four or blocks)), i.name
        assert (m["agran"] == "g128") == blocks and (not blocks or (m["code"] == "e4m3" and m["scale"] == "f32"))
        assert i.archs == (("89", "90a") if fp8 else tuple(archs)), i.name
        assert (i.backend, i.kernel, i.entry_suffix, i.layout) == ("sm80", "DenseA8", "_a8", 1)
        tile = tuple(int(m[x]) for x in ("bm", "bn", "bk", "wm", "wn", "wk", "st"))
        assert tile in tiles, i.name
        warp_k = tiles[tile]
        assert warp_k % 32 == 0 and warp_k <= 128, i.name
        bm, bn, bk, wm, wn, wk, st = tile
        assert bk == 128 or not four, i.name
        k = i.key
        want = (2, group, group) if blocks else (1, group, 1)
        assert (k["act_granularity"], k["group_k"], k["group_n"], k["zero"], k["layout"]) == (*want, 0, 1)
        assert (k["tile_m"], k["tile_n"], k["tile_k"], k["stages"], k["threads"]) == (bm, bn, bk, st, 32 * wm * wn * wk)
        # The stages (bm activation rows of bk bytes, bn weight rows of bk codes, with group scales
        # the bn channels' scales), the flag word and the segment list: DenseA8::kSmemTotal, which
        # each translation unit asserts.
        # Blocks: bm fp32 activation scales and the weight block's, in a 16-byte unit.
        per_row = bn * {"f32": 4, "bf16": 2, "f16": 2, "e8m0": 1}[m["scale"]]  # a group's scales of the tile
        scales = (bm * 4 + 16 if blocks else bk // group * per_row) if group else 0
        stage = bm * bk + bn * bk * (4 if four else 8) // 8 + scales
        assert k["smem_bytes"] == st * stage + 16 + 6 * 16 <= SMEM_PER_BLOCK[89], i.name
        assert i.scale == m["scale"] and i.out == m["out"]
    assert not any(e.get("experimental") for e in SM80_A8["entries"])
    for prof in PROFILES:
        names = gen("--arch", ";".join(archs), "--profile", prof, "--list").stdout.splitlines()
        built = [n for n in names if SM80_A8_RE.fullmatch(n)]
        assert any("_a-i8-pt_" in n for n in built) and any("_w-e2m1g32-se8m0_" in n for n in built), prof
    low = gen("--arch", "80;86", "--profile", "full+experimental", "--list").stdout.splitlines()
    assert any("_a-i8-pt_" in n for n in low if SM80_A8_RE.fullmatch(n))
    assert not any(SM80_A8_RE.fullmatch(n) and "_a-i8-" not in n for n in low), "FP8 mma needs sm_89"
    out = tmp_path / "gen"
    gen("--arch", "80;90a", "--profile", "ci", "--out", str(out))
    tus = {p.stem: p.read_text() for p in (out / "instances").glob("*.cu") if SM80_A8_RE.fullmatch(p.stem)}
    assert any("_a-e4m3-pt_w-e4m3gc" in n for n in tus) and any("_a-i8-pt_" in n for n in tus)
    assert any("_a-e4m3-pt_w-u4g128" in n for n in tus) and any("_w-e4m3g128n128" in n for n in tus)
    assert any("_w-e2m1g32-se8m0" in n for n in tus)
    for text in tus.values():
        assert "sm80::DenseA8<" in text and "sm80::can_implement_a8<" in text and "sm80::launch_a8<" in text
        assert "sm80::workspace_bytes_a8<" in text and "sm80::prepare_a8<" in text
    # The FP8 translation units are compiled for sm_90a alone in this 80 + 90a build.
    cmake = (out / "instances.cmake").read_text().splitlines()
    for fp8_tu in (n for n in tus if "_a-e4m3-" in n):
        flags = next(ln for ln in cmake if f"/{fp8_tu}.cu" in ln and "gencode" in ln)
        assert "code=sm_90a" in flags and "sm_80" not in flags


# Shared memory one block may use (CUDA programming guide, compute capabilities table): the
# registry's runs-on check applies the same limits.
SMEM_PER_BLOCK = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}


def _load_generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_instances_for_test", GEN)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("cc", sorted(SMEM_PER_BLOCK))
def test_full_matrix_gives_every_sm80_format_a_fast_instance_per_range(cc):
    """On each architecture, for every weight format of the full sm80 matrix and every M range of
    the table that architecture gets, the table's patterns reach an sm80 instance whose shared
    memory fits a block there: no format falls back to the generic backend for lack of a tile
    that fits (sm_86 / sm_89 allow 99 KiB)."""
    import fnmatch

    gen_mod = _load_generator()
    insts = [i for i in gen_mod.enumerate_instances(["90a"], "full") if i.backend == "sm80"]
    tables = gen_mod.dispatch_tables()
    sms = 132 if cc == 90 else 100
    table = next(
        t
        for t in tables
        if all((k != "cc" or cc in v) and (k != "sms" or sms == v) for k, v in t["match"].items() if k in ("cc", "sms"))
    )
    by_format: dict[str, list] = {}
    for i in insts:
        by_format.setdefault(i.name.split("_t")[0], []).append(i)
    assert len(by_format) >= 60
    for fmt, group in by_format.items():
        fitting = [i for i in group if i.key["smem_bytes"] <= SMEM_PER_BLOCK[cc]]
        for r in table["ranges"]:
            chosen = next((i for p in r["prefer"] for i in fitting if fnmatch.fnmatchcase(i.name, p)), None)
            assert chosen is not None and chosen.backend == "sm80", (cc, table["name"], r, fmt)


@pytest.mark.parametrize("cc", [80, 86, 89])
def test_sm80_a8_matrix_reaches_every_range_of_the_8x_tables(cc):
    """Once the sm80 family's 8-bit activation instances are in a build, every format of their
    full matrix that an sm_8x GPU runs (FP8 from sm_89 on) finds, in every M range of that
    architecture's table, one of them by the table's patterns, within the shared memory a block
    may use there: none of those formats is left to the generic backend."""
    import fnmatch

    gen_mod = _load_generator()
    arch = {80: "80", 86: "86", 89: "89"}[cc]
    insts = [
        i
        for i in gen_mod.enumerate_instances([arch], "full+experimental")
        if SM80_A8_RE.fullmatch(i.name) and i.key["smem_bytes"] <= SMEM_PER_BLOCK[cc]
    ]
    assert insts and all(arch in i.archs for i in insts)
    assert any("_a-e4m3-" in i.name for i in insts) == (cc == 89)
    table = next(
        t for t in gen_mod.dispatch_tables() if all(cc in v for k, v in t["match"].items() if k == "cc") and t["match"]
    )
    by_format: dict[str, list] = {}
    for i in insts:
        by_format.setdefault(i.name.split("_t")[0], []).append(i)
    for fmt, group in by_format.items():
        for r in table["ranges"]:
            chosen = next((i for p in r["prefer"] for i in group if fnmatch.fnmatchcase(i.name, p)), None)
            assert chosen is not None, (cc, table["name"], r["m_max"], fmt)


SM90_RE = re.compile(
    r"sm90_wgmma_(?P<sched>dense|moe)_a-(?P<act>[^_]+)_w-(?P<weight>[^_]+)_c-(?P<out>[^_]+)"
    r"_t(?P<bm>\d+)x(?P<bn>\d+)x(?P<bk>\d+)_w1x(?P<wg>\d)x1_s(?P<stages>\d+)(?P<lone>_lone)?(?P<split>_ks)?$"
)


def test_sm90_names_spell_format_and_tile(all_names):
    gen_mod = _load_generator()
    matrix = json.loads((ROOT / "tools" / "matrix" / "sm90.json").read_text())
    # The weight-only kernels (the 8-bit activation ones, also backend sm90, have their own test),
    # dense and grouped (MoE): the same kernel template, its last argument the scheduler kind.
    # With the experimental entries: the tiles of two 64-channel blocks per warpgroup are only there.
    insts = [
        i
        for i in gen_mod.enumerate_instances(["90a"], "full+experimental")
        if i.backend == "sm90" and i.kernel == "Dense"
    ]
    assert insts and all(i.layout == 3 and i.archs == ("90a",) for i in insts)
    assert {i.scheduler for i in insts} == {"dense", "moe"}
    grouped = json.loads((ROOT / "tools" / "matrix" / "sm90_moe.json").read_text())
    # Each scheduler's tiles from its matrix (the grouped one also has heights no dense tile has).
    tiles = {
        sched: {
            (t["bm"], 64 * t["consumers"] * t.get("blocks", 1), 64 * t["k_atoms"], t["stages"])
            for t in mx["tiles"].values()
        }
        for sched, mx in (("dense", matrix), ("moe", grouped))
    }
    for i in insts:
        m = SM90_RE.match(i.name)
        assert m, i.name
        # grouped instances ending _lone walk the experts' tiles with one producer thread, those
        # ending _ks split each tile's K into shares (with the producer's warp walking)
        assert not (m["lone"] and m["split"])
        walk = "Split" if m["split"] else "Lone" if m["lone"] else "Warp"
        sched = f"sm90::kSchedGrouped{walk}" if i.scheduler == "moe" else "sm90::kSchedDense"
        assert m["sched"] == i.scheduler and i.template_args[-1] == sched
        assert not (m["lone"] or m["split"]) or i.scheduler == "moe"
        assert m["act"] == m["out"] == i.act
        assert (int(m["bm"]), int(m["bn"]), int(m["bk"]), int(m["stages"])) in tiles[i.scheduler]
        # The kernel's Blocks (64-channel blocks per consumer warpgroup: 1, or 2 with at most two
        # consumers) follows Consumers in its arguments; the name gives the channels and consumers.
        consumers, blocks = int(i.template_args[5]), int(i.template_args[6])
        assert consumers == int(m["wg"]) and (blocks == 1 or (blocks == 2 and consumers <= 2)), i.name
        assert int(m["bn"]) == 64 * consumers * blocks and i.key["threads"] == 128 * (1 + consumers)
        # Stages start 1024-byte aligned; the ring plus barriers fits the 227 KiB of a block.
        assert i.key["smem_bytes"] <= 227 * 1024
    assert any(i.template_args[6] == "2" for i in insts)
    assert not any(i.backend == "sm90" for i in gen_mod.enumerate_instances(["80", "86", "89"], "full"))


def test_lone_producer_moe_instances_are_twins_of_default_ones():
    """The grouped tiles whose producer walks alone (names ending _lone) are each the twin of a
    default grouped instance with the same tile and key (so the dispatcher can swap one for the
    other per call). dev and ci build those GPU-tested (bf16 u4 g128 on the H200; dev also bf16 e2m1
    g32, session 38 on an H100, with the 256-channel twins (_w1x4x1) and the heights between the
    powers of two (t24, t48, t80) that the dispatcher's rules take, and the FP8 block tiles t64 and
    t128n128s5, faster than their warp twins on an H100 in session 42); the f16 and u8 twins, not
    yet run on a GPU, the 256-channel or in-between-height twins no measured point takes, and the
    other FP8 block twins (t192n128s4's slower than its warp twin, t32's untimed) only experimental
    profiles. The W4A8 grouped tiles (u4 and e2m1, per channel and per 128 inputs, layout 4) have in dev the lone
    twins the dispatcher's rules took on an H100 in session 44 (t8wl, t16wl, t32wl, t64wl of the
    256-channel tiles, t64l and t128l; t24wl, t48wl and t80l of the heights between the powers of
    two) and t144l (session 60: two an expert at 128 to 256 rows per expert), and for the
    per-channel formats t80c3l (session 61: t80's three-consumer mid twin); t8l, t16l, t24l, t32l
    and t48l stay experimental, as do t160 and t192 (session 59; they spill 12 to 200 bytes) and the
    three-consumer t64 tiles (no faster than the 256-channel ones), and the W4A16 tile of two
    64-channel blocks per warpgroup (t128x256, t144x256 and t176x256, sessions 62-63; t176's warp walk
    spills)."""
    gen_mod = _load_generator()
    dev = {i.name: i for i in gen_mod.enumerate_instances(["90a"], "dev")}
    exp = {i.name: i for i in gen_mod.enumerate_instances(["90a"], "dev+experimental")}
    lone_dev = [n for n in dev if n.endswith("_lone")]
    fp8_blocks = "sm90_wgmma_moe_a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16_"
    w4a8 = tuple(f"sm90_wgmma_moe_a-e4m3-pt_w-{w}-sbf16_c-bf16_" for w in ("u4gc", "u4g128", "e2m1gc", "e2m1g128"))
    assert lone_dev and all(
        n.startswith(("sm90_wgmma_moe_a-bf16_w-u4g128-", "sm90_wgmma_moe_a-bf16_w-e2m1g32-", fp8_blocks) + w4a8)
        for n in lone_dev
    )
    w4a8_tiles = ["t16x256x128_w1x4x1_s8", "t32x256x128_w1x4x1_s8", "t64x128x128_w1x2x1_s8", "t8x256x128_w1x4x1_s8"]
    w4a8_tiles += ["t64x256x128_w1x4x1_s6", "t128x128x128_w1x2x1_s6"]
    w4a8_tiles += ["t24x256x128_w1x4x1_s8", "t48x256x128_w1x4x1_s7", "t80x128x128_w1x2x1_s7"]
    w4a8_tiles += ["t144x128x128_w1x2x1_s6"]
    # The three-consumer mid twin of t80 (session 61) of the per-channel formats.
    mid = [w + "t80x192x128_w1x3x1_s6_l4_lone" for w in w4a8 if "gc-" in w]
    assert sorted(n for n in lone_dev if n.startswith(w4a8)) == sorted(
        [w + t + "_l4_lone" for w in w4a8 for t in w4a8_tiles] + mid
    )
    assert any(n.startswith("sm90_wgmma_moe_a-bf16_w-e2m1g32-") for n in lone_dev)
    assert sorted(n for n in lone_dev if n.startswith(fp8_blocks)) == [
        fp8_blocks + "t128x128x128_w2x1x1_s5_lone",
        fp8_blocks + "t64x128x128_w1x2x1_s8_lone",
    ]
    assert any(n.endswith("_lone") for n in (i.name for i in gen_mod.enumerate_instances(["90a"], "ci")))
    only_exp = [n for n in exp if n.endswith("_lone") and n not in dev]
    between = ("_t24x", "_t48x", "_t80x")
    assert only_exp and all(
        "_a-f16_" in n
        or "_w-u8gc-" in n
        or "_w1x4x1_" in n
        or "_t64x192x128_w1x3x1_" in n
        or any(t in n for t in ("_t128x256x", "_t144x256x", "_t176x256x"))
        or "_a-e4m3-" in n
        or any(h in n for h in between)
        for n in only_exp
    )
    for name, i in exp.items():
        if not name.endswith("_lone"):
            continue
        twin = exp[name[: -len("_lone")]]
        assert i.scheduler == twin.scheduler == "moe" and i.key == twin.key
        assert i.template_args[:-1] == twin.template_args[:-1] and i.template_args[-1] == "sm90::kSchedGroupedLone"


def test_k_split_moe_instances_are_twins_of_warp_ones():
    """The grouped tiles that split K (names ending _ks): dev and full build the 8-row ones of u4g128
    bf16 (the measured decode tiles grouped_pick may take), ci none but with +experimental (CI
    compiles one); each is the twin of a warp-walk grouped instance with the same tile and key, its
    scheduler kind the split one."""
    gen_mod = _load_generator()
    assert not any(i.name.endswith("_ks") for i in gen_mod.enumerate_instances(["90a"], "ci"))
    assert any(i.name.endswith("_ks") for i in gen_mod.enumerate_instances(["90a"], "ci+experimental"))
    for profile in ("dev", "full"):
        built = {i.name for i in gen_mod.enumerate_instances(["90a"], profile) if i.name.endswith("_ks")}
        for zero in ("", "-zi"):
            for tile in ("t8x128x128_w1x2x1_s8", "t8x256x128_w1x4x1_s8"):
                assert f"sm90_wgmma_moe_a-bf16_w-u4g128-sbf16{zero}_c-bf16_{tile}_ks" in built, (profile, zero, tile)
    exp = {i.name: i for i in gen_mod.enumerate_instances(["90a"], "dev+experimental")}
    split = [n for n in exp if n.endswith("_ks")]
    assert split
    for name in split:
        i, twin = exp[name], exp[name[: -len("_ks")]]
        assert i.scheduler == twin.scheduler == "moe" and i.key == twin.key
        assert i.template_args[:-1] == twin.template_args[:-1]
        assert twin.template_args[-1] == "sm90::kSchedGroupedWarp" and i.template_args[-1] == "sm90::kSchedGroupedSplit"


def test_h200_table_gives_every_sm90_format_an_sm90_instance_per_range():
    """Weights packed for layout 3 find an sm90 instance in every M range of the H200 table, for
    every format of the full sm90 matrix. Up to m = 32 it is the smallest tile height at or above
    the range's largest m (decode pads nothing it can avoid); above, never a taller tile than that
    (the table may take lower tiles where they were measured faster: 32-token tiles up to m = 64
    and 64-token ones up to m = 256 on narrow layers, 128-token ones up to m = 256), and never
    lower than a quarter of it."""
    import fnmatch

    gen_mod = _load_generator()
    insts = [i for i in gen_mod.enumerate_instances(["90a"], "full") if i.backend == "sm90"]
    table = next(t for t in gen_mod.dispatch_tables() if t["name"] == "h200")
    by_format: dict[str, list] = {}
    for i in insts:
        by_format.setdefault(i.name.split("_t")[0], []).append(i)
    assert len(by_format) >= 40
    heights = sorted({i.key["tile_m"] for i in insts})
    for fmt, group in by_format.items():
        for r in table["ranges"]:
            chosen = next((i for p in r["prefer"] for i in group if fnmatch.fnmatchcase(i.name, p)), None)
            assert chosen is not None and chosen.backend == "sm90", (fmt, r)
            # The smallest tile height at or above the range's largest m (the full matrix has all).
            want = min([h for h in heights if r["m_max"] is not None and h >= r["m_max"]] or [heights[-1]])
            if r["m_max"] is not None and r["m_max"] <= 32:
                assert chosen.key["tile_m"] == want, (fmt, r, chosen.name)
            else:
                assert want // 4 <= chosen.key["tile_m"] <= want, (fmt, r, chosen.name)


# Forced-instance sweeps on the H200 (session 13, u4g128 bf16, graph us after a read flush; the
# closing note and benchmarks/results/h200/tuning hold the numbers): (n, k, m) -> the tile height
# that was fastest, which the table must pick from the dev matrix.
H200_MEASURED_BEST = [
    (3584, 3584, 128, 32),
    (4096, 4096, 96, 32),
    (2880, 4096, 128, 32),
    (4608, 3584, 128, 64),
    (4096, 14336, 128, 64),
    (3584, 18944, 96, 64),
    (1536, 7168, 128, 64),
    (6144, 4096, 64, 32),
    (7168, 5120, 48, 32),
    (5120, 2880, 64, 32),
    (5120, 13824, 64, 64),
    (7168, 18432, 64, 64),
    (3584, 3584, 256, 64),
    (5120, 2880, 256, 128),
]


@pytest.mark.parametrize("n,k,m,best", H200_MEASURED_BEST)
def test_h200_table_picks_the_measured_tile(n, k, m, best):
    import fnmatch

    from humming_aot import dispatch

    gen_mod = _load_generator()
    fmt = "sm90_wgmma_dense_a-bf16_w-u4g128-sbf16_c-bf16_"
    dev = [i for i in gen_mod.enumerate_instances(["90a"], "dev") if i.name.startswith(fmt)]
    table = dispatch._validate_table(next(t for t in gen_mod.dispatch_tables() if t["name"] == "h200"), "h200")
    r = table["ranges"][dispatch._range_index(table, m, n, k)]
    chosen = next(i for p in r["prefer"] for i in dev if fnmatch.fnmatchcase(i.name, p))
    assert chosen.key["tile_m"] == best, (n, k, m, chosen.name, r.get("why"))


# Session 16's sweeps on the H200 (scripts/sweep_tiles.py: every u4g128 bf16 sm90 tile, graph us):
# the shape corpus at 17 values of M and 15 other layer shapes at 14 other values of M, which the
# table's tile costs were fitted to (tools/fit_tile_costs.py), and 12 more shapes at 15 more values
# of M that no fit saw; every tile of 16 tokens and more re-timed in session 27 after the tail
# boxes (backend/sm90/stage_loads.h), and the costs refitted with their fifth term (the partials of
# the most split tile), with estimates that may take tiles up to twice the height that holds m.
# Geometric means 1.002 / 1.001 / 1.001; worst points 1.11 (36864x7168 at m = 2048, t256 against
# t128), 1.08 (2048x2048 at m = 4) and, held out, 1.05 (9216x3072 at m = 10).
# (file, points, tiles timed, bound on the geometric mean of chosen / fastest, bound on any point)
# Session 18's sweeps of the 8-bit activation kernels (the corpus at 16 values of M, every tile of
# one format each, activation quantization included): the a8w8 costs were fitted to e4m3gc (with
# the overlapped promotion of sm90_a8_dense.cuh) and the a8w4 ones to e2m1gc and u4g128; the block
# and i8 x i8 kernels take the a8w8 costs unfitted (their sweeps predate the overlap). The worst
# points are mid-M deep layers where the 64 x 192 tile is estimated faster than 128 x 128.
# (file, points, tiles timed, bound on the geometric mean of chosen / fastest, bound on any point)
# (sweep, points, tiles, geometric-mean bound, bound per point, largest m counted or None: all).
# Session 18's and 19's W4A8 sweeps count up to m = 32 only: their larger m were timed before the
# W4A8 t128 spread (scheduler/streamk.h, HeavySpread::kHalf) and the kernels' later changes, and
# session 55 re-timed m = 48 to 512 in layout 4 (the W4A8 default), the sweeps the a8w4 tile
# costs are now fitted to. The W8A8 ones are within 1.1 % (e4m3gc, worst 1.18x) and 1.3 % (i8gc,
# worst 1.24x) with humming.h's kRowsApartPenalty8, 2.8 % and 3.1 % (worst 1.61x and 1.63x) without.
# Session 57's sweep ran on an H100 (132 SMs, the same table) after the W4A8 loops began reading
# codes ahead, m = 48 to 2048; the a8w4 t128 and t192 costs were refitted to it and to session 55's
# e2m1gc sweep: 0.8 %, worst 1.12x (t64 over t32 at m = 64, whose costs stay session 55's).
# Session 64's two sweeps (H100, the same kernels run twice) time the weight-only tiles of 128 tokens
# and more (t128x128x128, t256x128x64, t176x256x64 and the uncosted t128x256x128) at m = 256 to
# 16384, past the 16 rows of tiles the older sweeps stop at: the estimates cover those tiles up to
# 128 rows since (registry.cpp, estimate_max_tile_rows), and t176x256x64's cost is its fit to these
# sweeps scaled by t128's H200 / H100 ratio. The table's choices are within 1.0 % of the fastest
# tile (was 8.3 %, t256 by the patterns past 16 rows). Session 27's first sweep counts up to
# m = 2048: at m = 4096 the estimates now take t128 at 32 rows, which it did not time.
# A sweep's file lies under benchmarks/results/<its device>/tuning.
H200_SWEEPS = [
    ("h200-2026-12-04-s27-sweep-u4g128.json", 375, 8, 1.005, 1.15, 2048),
    ("h200-2026-12-04-s27-sweep-u4g128-holdout.json", 200, 8, 1.005, 1.15, None),
    ("h200-2026-12-04-s27-sweep-u4g128-holdout3.json", 150, 8, 1.005, 1.1, None),
    ("h200-2026-12-02-s18-sweep-a8-overlap-e4m3gc.json", 400, 8, 1.02, 1.25, None),
    ("h200-2026-12-02-s18-sweep-a8-e2m1gc.json", 125, 10, 1.01, 1.1, 32),
    ("h200-2026-12-02-s18-sweep-a8-u4g128.json", 125, 10, 1.01, 1.1, 32),
    ("h200-2026-12-02-s19-sweep-a8-e2m1gc.json", 125, 10, 1.01, 1.1, 32),
    ("h200-2026-12-02-s19-sweep-a8-u4g128.json", 125, 10, 1.01, 1.1, 32),
    ("h200-2026-12-07-s55-sweep-w4a8-e2m1gc-l4.json", 200, 11, 1.01, 1.2, None),
    ("h200-2026-12-07-s55-sweep-w4a8-u4g128-l4.json", 200, 10, 1.005, 1.1, None),
    ("h100-2026-12-07-s57-sweep-w4a8-e2m1gc-l4.json", 300, 11, 1.01, 1.15, None),
    ("h200-2026-12-02-s18-sweep-a8-blocks.json", 400, 7, 1.02, 1.5, None),
    ("h200-2026-12-02-s18-sweep-a8-i8gc.json", 425, 8, 1.02, 1.3, None),
    ("h100-2026-12-07-s64-sweep-u4g128-large-m.json", 200, 4, 1.015, 1.15, None),
    ("h100-2026-12-07-s64-sweep-u4g128-large-m-2.json", 200, 4, 1.015, 1.15, None),
]


@pytest.mark.parametrize("name,points,tiles,mean_bound,point_bound,m_max", H200_SWEEPS)
def test_h200_table_is_near_the_fastest_tile_over_the_sweeps(name, points, tiles, mean_bound, point_bound, m_max):
    import math

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import table_regret
    finally:
        sys.path.pop(0)
    gen_mod = _load_generator()
    table = next(t for t in gen_mod.dispatch_tables() if t["name"] == "h200")
    sweep = json.loads((ROOT / "benchmarks/results" / name.split("-")[0] / "tuning" / name).read_text())
    times = {}
    for p in sweep["points"]:
        if m_max is None or p["m"] <= m_max:
            times.setdefault((p["n"], p["k"], p["m"]), {})[p["instance"]] = p["us"]
    names = sorted({p["instance"] for p in sweep["points"]})
    assert len(times) >= points and len(names) == tiles
    ratios, far, retimed = [], [], 0
    for (n, k, m), here in times.items():
        layout = table_regret.sweep_layout(sweep)
        pick = table_regret.choose(table, m, n, k, names, 132, layout)
        assert pick in here, (n, k, m, pick)  # the sweep timed every tile the table can pick
        if _whole_decode_wave(pick, n, k, m, layout) or _whole_w8a8_two_rows(pick, n, k, m, layout):
            retimed += 1
            continue
        ratio = here[pick] / min(here.values())
        ratios.append(ratio)
        if ratio > point_bound:
            far.append((n, k, m, pick, ratio))
    assert not far, far
    assert math.exp(sum(map(math.log, ratios)) / len(ratios)) < mean_bound
    # (Session 18's and 19's W4A8 sweeps have 12 such points among their 125 up to m = 32.)
    assert retimed <= len(times) // 10, f"{retimed} of {len(times)} points need a new sweep"


def _whole_decode_wave(name: str, n: int, k: int, m: int, layout: int) -> bool:
    """Whether the launch of instance `name` is one row of decode tiles (m up to the tile's height)
    whose partial last wave now stays whole tiles (scheduler/streamk.h, kPersistentDecodeBusyNum:
    since session 49): the sweeps above predate the rule and timed such launches spread, so their
    times are not the pick's. H100, session 49 (benchmarks/results/h100/tuning/
    h100-2026-12-06-s49-README.md), u4g128 at m = 4: 16384 x 2048 and 16384 x 3072, which the
    estimates now give t16x128 (128 whole tiles), took 12.5 and 15.2 us against 16.4 and 19.0 for
    the spread t8x256 they gave before; the holdout sweep's times make t16x128 1.16x its fastest."""
    from humming_aot import formats
    from humming_aot._ext import C

    tile = tuple(int(v) for v in re.search(r"_t(\d+)x(\d+)x(\d+)_", name).groups())
    if tile[0] >= 32 or m > tile[0]:
        return False
    fmt = formats.parse_gemm_format(re.search(r"_(a-.*_c-[a-z0-9]+)_t\d", name).group(1))
    facts = C.persistent_launch_facts(name.split("_", 1)[0], *tile, str(fmt), layout, n, k, m, 132)
    return facts is not None and not facts[2] and -(-n // tile[1]) % 132 != 0


def _whole_w8a8_two_rows(name: str, n: int, k: int, m: int, layout: int) -> bool:
    """Whether the launch of instance `name` is two rows of W8A8 t64 tiles (8-bit codes x 8-bit
    activations, m = 65 to 128) that now keep whole tiles where the sweeps above timed them spread
    (scheduler/streamk.h, MidSpread::kDeep, since session 56: over a K beyond 8192, or in the tail
    after whole waves, more tiles than half the multiprocessors). H100, session 56
    (benchmarks/results/h100/tuning/h100-2026-12-07-s56-README.md): the dispatcher's choices with
    the new plans took 0.935x the time of its choices before on five deep layers at m = 96, 128 and
    256 (8192 x 28672 at m = 96 96.4 us against 144.4)."""
    from humming_aot import formats
    from humming_aot._ext import C

    tile = tuple(int(v) for v in re.search(r"_t(\d+)x(\d+)x(\d+)_", name).groups())
    fmt = formats.parse_gemm_format(re.search(r"_(a-.*_c-[a-z0-9]+)_t\d", name).group(1))
    if tile[0] != 64 or -(-m // 64) != 2 or fmt.act.type.bits != 8 or fmt.weight.code.bits != 8:
        return False
    tiles = 2 * -(-n // tile[1])
    facts = C.persistent_launch_facts(name.split("_", 1)[0], *tile, str(fmt), layout, n, k, m, 132)
    return not facts[2] and tiles % 132 != 0 and (k > 8192 or tiles > 132)


def test_table_regret_reads_ranges_as_the_dispatcher_does():
    import types

    from humming_aot import dispatch
    from humming_aot import formats as F

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import table_regret
    finally:
        sys.path.pop(0)
    from humming_aot.pack import LAYOUTS

    assert table_regret.LAYOUTS == LAYOUTS  # its copy, kept so that it runs without a built package
    gen_mod = _load_generator()
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    insts = [i for i in gen_mod.enumerate_instances(["90a"], "dev") if i.name.startswith(f"sm90_wgmma_dense_{fmt}_")]
    cands = [
        types.SimpleNamespace(name=i.name, backend="sm90", tile=(i.key["tile_m"], i.key["tile_n"], i.key["tile_k"]))
        for i in insts
    ]
    cands.sort(key=lambda c: c.name)
    names = [c.name for c in cands]
    assert len(names) == 9  # t176x256x64 (two blocks) since session 64
    picked = set()
    for table in gen_mod.dispatch_tables():
        if table["name"] != "h200":  # the other tables name no sm90 tile of this format
            continue
        table = dispatch._validate_table(table, table["name"])
        for m, n, k in itertools.product(
            (1, 9, 33, 100, 200, 300, 700, 1500, 5000), (576, 4608, 9000, 30000), (2880, 9000, 20000)
        ):
            idx = dispatch._range_index(table, m, n, k)
            want = dispatch._pick(table, idx, cands, (F.parse_gemm_format(fmt), n, k, m, 132, 3))[0].name
            assert table_regret.choose(table, m, n, k, names, 132) == want, (table["name"], m, n, k)
            picked.add(want)
    assert len(picked) >= 6  # the estimate ranges take most tiles somewhere


def test_sm80_instances_only_for_their_architectures(gen):
    names = gen("--arch", "100a", "--profile", "dev", "--list").stdout.splitlines()
    assert names and not any(n.startswith("sm80_") for n in names)
    names = gen("--arch", "86", "--profile", "dev", "--list").stdout.splitlines()
    assert any(n.startswith("sm80_") for n in names)


def test_bad_profile_is_a_usage_error(gen):
    p = gen("--arch", "90a", "--profile", "nightly", "--list", check=False)
    assert p.returncode == 2
    assert "unknown profile 'nightly'; profiles: ci, dev, full" in p.stderr


def test_arch_without_matrix_entries_is_warned_about(gen):
    p = gen("--arch", "100", "--profile", "ci", "--count")
    assert int(p.stdout) == 0
    assert "no matrix entry compiles for sm_100" in p.stderr
    assert "warning" not in gen("--arch", "90a", "--profile", "ci", "--count").stderr


# ---- experimental entries (kernels not yet checked on a GPU) and the sm90 8-bit activation kernels

A8_RE = re.compile(
    r"sm90_wgmma_(?P<sched>dense|moe)_a-(?P<act>e4m3|e5m2|i8)-(?P<agran>pt|g128)_w-(?P<code>e4m3|i8|u4|i4|e2m1)(?P<wgran>gc|g128n128|g128)"
    r"-s(?P<scale>f32|bf16|f16)_c-(?P<out>[^_]+)_t(?P<bm>\d+)x(?P<bn>\d+)x128_(w1x(?P<wg>\d)x1|w(?P<wgm>\d)x1x1)_s(?P<stages>\d+)(_b(?P<batch>\d))?(_l(?P<layout>4))?(?P<lone>_lone)?$"
)


@pytest.mark.parametrize("profile", PROFILES)
def test_experimental_entries_only_with_the_suffix(gen, all_names, profile):
    """The same profile with +experimental compiles everything the plain one does, plus only the
    entries marked experimental; the sm90 8-bit activation kernels passed their GPU tests on the
    H200 and are in every plain profile, and in no 8.x-only build (they are sm_90a code)."""
    plain = set(all_names[profile])
    with_exp = set(gen("--arch", "90a", "--profile", profile + "+experimental", "--list").stdout.splitlines())
    assert plain <= with_exp
    marked = []
    for path in sorted((ROOT / "tools" / "matrix").glob("*.json")):
        marked += [e for e in json.loads(path.read_text())["entries"] if e.get("experimental")]
    if not marked:
        assert with_exp == plain
    assert any(A8_RE.match(n) and "-pt_" in n for n in plain) and any(A8_RE.match(n) and "-g128_" in n for n in plain)
    assert not any(
        A8_RE.match(n)
        for n in gen("--arch", "80;86;89", "--profile", profile + "+experimental", "--list").stdout.splitlines()
    )


def test_profile_suffix_other_than_experimental_is_refused(gen):
    p = gen("--arch", "90a", "--profile", "dev+fast", "--list", check=False)
    assert p.returncode != 0
    assert "unknown profile 'dev+fast'" in p.stderr and "+experimental" in p.stderr


def test_a8_instances_keys_and_entry_points(gen, tmp_path):
    """The sm90 8-bit activation instances take per-token activation scales and per-channel weight
    scales; or, with 4-bit codes, a weight scale per channel and 128 inputs; or activation scales per
    token and 128 inputs and 128 x 128 weight blocks (fp32, 8-bit codes); 8-bit float tiles of at
    most 128 tokens, on the generic layout (4-bit codes also on layout 4), with the shared memory
    of their ring (4-bit codes: rows of 64 bytes in the weights' box); their translation units call
    the FP8 kernel's entry points. The grouped (MoE) ones (sm90_a8_moe.json) are the same kernel
    with the grouped scheduler: a segment note per stage, no output boxes in the four-consumer
    tiles with the channels on M, and with blocks and the tokens on M, 4 activation scales more per
    stage (kScaleLead)."""
    gen_mod = _load_generator()
    insts = [i for i in gen_mod.enumerate_instances(["90a"], "full+experimental") if A8_RE.match(i.name)]
    assert insts and any("-g128_" in i.name for i in insts) and any("-pt_" in i.name for i in insts)
    assert any("_a-i8-pt_w-i8gc-" in i.name for i in insts)
    for code in ("u4", "i4", "e2m1"):
        assert any(f"_a-e4m3-pt_w-{code}gc-" in i.name for i in insts), code
    assert any("_a-e4m3-pt_w-u4g128-" in i.name for i in insts) and any("_a-i8-pt_w-u4gc-" in i.name for i in insts)
    for i in insts:
        m = A8_RE.match(i.name)
        bm, bn, stages = int(m["bm"]), int(m["bn"]), int(m["stages"])
        k = i.key
        blocks = m["agran"] == "g128"
        groups = m["wgran"] == "g128"
        four = m["code"] in ("u4", "i4", "e2m1")
        assert (m["wgran"] == "g128n128") == blocks, i.name
        assert groups <= four, "scales per channel and group: 4-bit codes"
        want = (2, 128, 128) if blocks else ((1, 128, 1) if groups else (1, 0, 1))
        layout = int(m["layout"] or 1)  # _l4: 4-bit codes in layout 4 (sm90a8)
        assert layout == 1 or four, i.name
        assert (k["act_granularity"], k["group_k"], k["group_n"], k["zero"], k["layout"]) == (*want, 0, layout)
        assert (k["tile_m"], k["tile_n"], k["tile_k"], k["stages"]) == (bm, bn, 128, stages)
        grouped = m["sched"] == "moe"
        assert i.scheduler == m["sched"]
        walk = "sm90::kSchedGroupedLone" if m["lone"] else "sm90::kSchedGroupedWarp"
        assert i.template_args[-1] == (walk if grouped else "sm90::kSchedDense"), i.name
        assert grouped or not m["lone"], i.name
        # _w<c>x1x1: the tokens on the WGMMA's M side, 64 per consumer warpgroup, e4m3 x e4m3 (with
        # blocks, tiles of 128-channel multiples); _w1x<c>x1: the channels, 64 per warpgroup.
        tokens_m = m["wgm"] is not None
        consumers = int(m["wgm"] or m["wg"])
        assert k["threads"] == 128 * (1 + consumers)
        if tokens_m:
            assert bm == 64 * consumers and (m["act"], m["code"]) == ("e4m3", "e4m3") and bn <= 192, i.name
            assert not blocks or bn % 128 == 0, i.name
        else:
            assert bn == 64 * consumers
        wblocks = ((64 if bn % 128 else 0) + bn + 127) // 128  # the 128-channel blocks a tile touches
        scale_bytes = {"f32": 4, "bf16": 2, "f16": 2}[m["scale"]]
        lead = 4 if grouped and blocks and tokens_m else 0
        scales = (bm + lead + wblocks) * 4 if blocks else (bn * scale_bytes if groups else 0)
        stage = bn * (64 if four else 128) + bm * 128 + scales
        smem = 1024 + -(-stage // 1024) * 1024 * stages + 16 * stages + 16 + (32 * stages if grouped else 0)
        # The output boxes of the staged stores (epilogue/staged_store.h): one of bm rows x 128
        # bytes per consumer warpgroup, for 16-bit outputs in tiles of 64 tokens and more where
        # they fit beside the ring.
        # With the tokens on M: 64 tokens x bn outputs per consumer warpgroup.
        boxes = consumers * (64 * bn * 2 if tokens_m else bm * 128)
        fits = smem + boxes <= 227 * 1024
        direct = grouped and not tokens_m and consumers > 3  # DenseA8::kOutBytes: four-consumer grouped tiles
        if m["out"] in ("bf16", "f16") and (tokens_m or (bm >= 64 and bm % 16 == 0 and not direct)) and fits:
            smem += boxes
        assert k["smem_bytes"] == smem <= 227 * 1024, i.name
        if blocks:
            assert m["scale"] == "f32" and m["act"] != "i8" and m["code"] == "e4m3"
        if m["act"] != "i8" and not tokens_m:
            # 8-bit floats keep each stage's sums apart: at most 128 tokens, or 192 where the codes
            # are 4-bit (register fragments, two consumers)
            assert bm <= (192 if four and m["wg"] == "2" else 128), i.name
        if m["act"] == "i8":
            assert m["code"] in ("i8", "u4", "i4") and not groups, "integer WGMMA: integer codes, per channel"
        else:
            assert m["code"] != "i8"
        if m["batch"]:  # batches of stages: 8-bit floats, the ring holds them (and the next, converted) and more
            assert m["act"] != "i8" and stages >= (2 if four else 1) * int(m["batch"]) + 1, i.name
        assert i.archs == ("90a",) and i.scale == m["scale"] and i.out == m["out"]
    out = tmp_path / "gen"
    gen("--arch", "90a", "--profile", "ci+experimental", "--out", str(out))
    tus = [p for p in (out / "instances").glob("*.cu") if A8_RE.match(p.stem)]
    assert tus
    for p in tus:
        text = p.read_text()
        assert "sm90::DenseA8<" in text and "sm90::can_implement_a8<" in text and "sm90::launch_a8<" in text
        assert "sm90::workspace_bytes_a8<" in text
