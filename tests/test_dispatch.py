"""CPU tests of the dispatcher (humming_aot.dispatch).

``choose`` needs a CUDA device, so its parts are tested one by one: table validation, M-range
lookup, the preference order and fallback of ``_pick`` (with hand-made registry.Instance objects),
table matching, ``force`` and ``reset``. Every test leaves the dispatcher's global state as it found
it (an autouse fixture calls ``dispatch.reset()`` before and after).
"""

import bisect
import itertools
import json

import pytest

from humming_aot import dispatch, pack, registry
from humming_aot import formats as F


@pytest.fixture(autouse=True)
def clean_dispatch():
    dispatch.reset()
    yield
    dispatch.reset()


def inst(name, backend=None):
    """A registry.Instance built by hand; the backend defaults to the name's first word."""
    return registry.Instance(
        name=name,
        backend=backend or name.split("_")[0],
        scheduler="dense",
        archs=("90a",),
        act_type="bf16",
        code_type="u4",
        scale_type="bf16",
        zero="none",
        out_type="bf16",
        layout=1,
        group_k=-1,
        group_n=-1,
        tile=(32, 64, 32),
        stages=1,
        threads=256,
        smem_bytes=0,
    )


def table(*ranges, **extra):
    """A table from (m_max, prefer) pairs."""
    return {"ranges": [{"m_max": m, "prefer": list(p)} for m, p in ranges], **extra}


# ---- table validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, message",
    [
        ({}, r"needs a non-empty list 'ranges'"),
        ({"ranges": []}, r"needs a non-empty list 'ranges'"),
        ({"ranges": "fast"}, r"needs a non-empty list 'ranges'"),
        ({"ranges": [{"m_max": None}]}, r"range 0 needs 'prefer', a list of name patterns"),
        ({"ranges": [{"m_max": None, "prefer": ["generic_*", 3]}]}, r"range 0 needs 'prefer'"),
        (
            table((16, ["a*"]), (16, ["b*"]), (None, ["c*"])),
            r"m_max values must be increasing positive integers \(range 1 has 16\)",
        ),
        (
            table((64, ["a*"]), (16, ["b*"]), (None, ["c*"])),
            r"m_max values must be increasing positive integers \(range 1 has 16\)",
        ),
        (table((0, ["a*"]), (None, ["c*"])), r"m_max values must be increasing positive integers \(range 0 has 0\)"),
        (table(("16", ["a*"]), (None, ["c*"])), r"increasing positive integers \(range 0 has '16'\)"),
        (table((True, ["a*"]), (None, ["c*"])), r"increasing positive integers \(range 0 has True\)"),
        (table((16, ["a*"]), (64, ["b*"])), r"the last range must have m_max null"),
        (table((None, ["a*"]), (16, ["b*"])), r"only the last range may have m_max null"),
        (table((None, ["a*"]), (None, ["b*"])), r"only the last range may have m_max null"),
        (
            {
                "ranges": [
                    {"m_max": 16, "n_min": 0, "prefer": ["a*"]},
                    {"m_max": 16, "prefer": ["b*"]},
                    {"m_max": None, "prefer": ["c*"]},
                ]
            },
            r"n_min must be a positive integer \(range 0 has 0\)",
        ),
        (
            {
                "ranges": [
                    {"m_max": 16, "n_min": "wide", "prefer": ["a*"]},
                    {"m_max": 16, "prefer": ["b*"]},
                    {"m_max": None, "prefer": ["c*"]},
                ]
            },
            r"n_min must be a positive integer",
        ),
        (
            {
                "ranges": [
                    {"m_max": 16, "n_min": 4096, "prefer": ["a*"]},
                    {"m_max": 64, "prefer": ["b*"]},
                    {"m_max": None, "prefer": ["c*"]},
                ]
            },
            r"range 0 has n_min, so the next range must have the same m_max",
        ),
        (
            {"ranges": [{"m_max": 16, "prefer": ["a*"]}, {"m_max": None, "n_min": 4096, "prefer": ["b*"]}]},
            r"range 1 has n_min, so the next range must have the same m_max",
        ),
        (
            {
                "ranges": [
                    {"m_max": 16, "k_max": -8, "prefer": ["a*"]},
                    {"m_max": 16, "prefer": ["b*"]},
                    {"m_max": None, "prefer": ["c*"]},
                ]
            },
            r"k_max must be a positive integer \(range 0 has -8\)",
        ),
        (
            {
                "ranges": [
                    {"m_max": 16, "prefer": ["a*"]},
                    {"m_max": None, "n_min": 64, "k_max": 4096, "prefer": ["b*"]},
                ]
            },
            r"range 1 has n_min and k_max, so the next range must have the same m_max",
        ),
    ],
)
def test_load_table_rejects_bad_tables(bad, message):
    with pytest.raises(ValueError, match=message):
        dispatch.load_table(bad)
    assert dispatch._user_tables == []  # a refused table is not installed


def test_load_table_error_names_the_origin(tmp_path):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(table((16, ["a*"]))))
    with pytest.raises(ValueError, match=r"dispatch table .*tuned\.json: the last range must have m_max null"):
        dispatch.load_table(path)


def test_load_table_missing_file(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(FileNotFoundError, match=r"dispatch table file .*nowhere\.json does not exist"):
        dispatch.load_table(missing)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        dispatch.load_table(str(missing))


def test_load_table_from_file_goes_in_front(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table((8, ["x*"]), (None, ["y*"]), name="mine")))
    first = dispatch.load_table(table((None, ["z*"])))
    second = dispatch.load_table(path)
    assert second["name"] == "mine"
    assert dispatch._user_tables == [second, first]  # the newest table is consulted first
    assert first["name"] == "<dict>" and first["match"] == {}


def test_load_table_does_not_modify_the_callers_dict():
    mine = table((4, ["a*"]), (None, ["b*"]))
    dispatch.load_table(mine)
    assert set(mine) == {"ranges"}


def test_builtin_tables_are_valid_and_default_is_last():
    assert dispatch._BUILTIN, "no built-in dispatch table"
    assert dispatch._BUILTIN[-1]["name"] == "default"
    assert dispatch._BUILTIN[-1]["match"] == {}  # the default table matches every device
    for t in dispatch._BUILTIN:
        assert t["ranges"][-1]["m_max"] is None


# ---- M ranges -----------------------------------------------------------------------------------


def expected_range(t, m, n=4096, k=4096):
    """Index of the first range whose m_max is null or >= m, whose n_min (if any) is <= n and whose
    k_max (if any) is >= k (a linear scan written apart from the dispatcher's)."""
    for i, r in enumerate(t["ranges"]):
        if (
            (r["m_max"] is None or m <= r["m_max"])
            and ("n_min" not in r or n >= r["n_min"])
            and ("k_max" not in r or k <= r["k_max"])
        ):
            return i
    raise AssertionError("the last range covers every m")


def test_range_index_boundaries():
    t = dispatch._validate_table(table((1, ["a"]), (16, ["b"]), (64, ["c"]), (None, ["d"])), "test")
    assert dispatch._range_index(t, 1, 4096, 4096) == 0
    assert dispatch._range_index(t, 2, 4096, 4096) == 1
    assert dispatch._range_index(t, 16, 4096, 4096) == 1  # m == m_max stays in that range
    assert dispatch._range_index(t, 17, 4096, 4096) == 2  # m_max + 1 goes to the next
    assert dispatch._range_index(t, 64, 4096, 4096) == 2
    assert dispatch._range_index(t, 65, 4096, 4096) == 3
    assert dispatch._range_index(t, 10**9, 4096, 4096) == 3
    for m in range(1, 200):
        assert dispatch._range_index(t, m, 4096, 4096) == expected_range(t, m), m


def test_range_index_single_range():
    t = dispatch._validate_table(table((None, ["a"])), "test")
    for m in (1, 7, 4096, 10**6):
        assert dispatch._range_index(t, m, 64, 4096) == 0


WIDE = {
    "ranges": [
        {"m_max": 16, "n_min": 20000, "prefer": ["w16*"]},
        {"m_max": 16, "prefer": ["a16*"]},
        {"m_max": 64, "prefer": ["a64*"]},
        {"m_max": None, "n_min": 10000, "prefer": ["wbig*"]},
        {"m_max": None, "prefer": ["abig*"]},
    ]
}


def test_range_index_with_n_min():
    t = dispatch._validate_table(json.loads(json.dumps(WIDE)), "test")
    assert dispatch._range_index(t, 16, 20000, 4096) == 0  # n == n_min takes the wide range
    assert dispatch._range_index(t, 16, 19999, 4096) == 1
    assert dispatch._range_index(t, 17, 50000, 4096) == 2  # no wide range for 17..64
    assert dispatch._range_index(t, 65, 10000, 4096) == 3
    assert dispatch._range_index(t, 65, 9999, 4096) == 4
    for n in (1, 9999, 10000, 19999, 20000, 10**6):
        for m in range(1, 100):
            assert dispatch._range_index(t, m, n, 4096) == expected_range(t, m, n), (m, n)


SHALLOW = {
    "ranges": [
        {"m_max": 16, "prefer": ["a16*"]},
        {"m_max": 128, "n_min": 8192, "prefer": ["w128*"]},
        {"m_max": 128, "k_max": 8192, "prefer": ["s128*"]},
        {"m_max": 128, "prefer": ["a128*"]},
        {"m_max": None, "n_min": 4096, "k_max": 4096, "prefer": ["wsbig*"]},
        {"m_max": None, "prefer": ["abig*"]},
    ]
}


def test_range_index_with_k_max():
    t = dispatch._validate_table(json.loads(json.dumps(SHALLOW)), "test")
    assert dispatch._range_index(t, 64, 8192, 16384) == 1  # wide first, whatever k
    assert dispatch._range_index(t, 64, 4096, 8192) == 2  # k == k_max takes the shallow range
    assert dispatch._range_index(t, 64, 4096, 8193) == 3
    assert dispatch._range_index(t, 129, 4096, 4096) == 4  # both limits hold
    assert dispatch._range_index(t, 129, 4095, 4096) == 5
    assert dispatch._range_index(t, 129, 4096, 4097) == 5
    for n in (1, 4095, 4096, 8191, 8192):
        for k in (1, 4096, 4097, 8192, 8193):
            for m in range(1, 200, 7):
                assert dispatch._range_index(t, m, n, k) == expected_range(t, m, n, k), (m, n, k)
            bounds, applying = dispatch._bounds_for(t, n, k)
            for m in range(1, 200):
                assert applying[bisect.bisect_left(bounds, m)] == expected_range(t, m, n, k), (m, n, k)


def test_layer_plan_follows_n_min():
    """A layer's cached M bounds are those of the ranges that apply to its n."""
    t = dispatch._validate_table(json.loads(json.dumps(WIDE)), "test")
    for n in (9999, 10000, 20000):
        bounds, applying = dispatch._bounds_for(t, n, 4096)
        for m in range(1, 100):
            assert applying[bisect.bisect_left(bounds, m)] == expected_range(t, m, n), (m, n)


# ---- preference order and fallback --------------------------------------------------------------


def test_pick_follows_pattern_order_not_candidate_order():
    t = table((16, ["sm90_*", "generic_*"]), (None, ["generic_*", "sm90_*"]))
    cands = [inst("generic_dense_a"), inst("sm90_wgmma_a"), inst("sm80_mma_a")]
    chosen, why = dispatch._pick(t, 0, cands)
    assert chosen.name == "sm90_wgmma_a"
    assert "'sm90_*'" in why
    chosen, why = dispatch._pick(t, 1, cands)
    assert chosen.name == "generic_dense_a"
    assert "'generic_*'" in why


def test_pick_takes_the_first_candidate_within_a_pattern():
    t = table((None, ["sm90_*"]))
    a, b = inst("sm90_b128"), inst("sm90_b64")
    assert dispatch._pick(t, 0, [a, b])[0] is a
    assert dispatch._pick(t, 0, [b, a])[0] is b


def test_pick_patterns_are_case_sensitive_globs():
    t = table((None, ["SM90_*", "sm80_mma_?"]))
    cands = [inst("sm90_x"), inst("sm80_mma_ab"), inst("sm80_mma_a")]
    chosen, why = dispatch._pick(t, 0, cands)
    assert chosen.name == "sm80_mma_a"  # "SM90_*" matches nothing, "?" is one character
    assert "sm80_mma_?" in why


def test_pick_fallback_prefers_fast_backends_then_name():
    t = table((None, ["nothing_matches_*"]))
    cands = [
        inst("generic_dense_b"),
        inst("sm90_wgmma_z"),
        inst("generic_dense_a"),
        inst("sm80_mma_y"),
        inst("sm90_wgmma_c"),
    ]
    fast = sorted(c.name for c in cands if c.backend != "generic")
    for perm in itertools.permutations(cands):
        chosen, why = dispatch._pick(t, 0, list(perm))
        assert chosen.name == fast[0], [c.name for c in perm]
        assert "fallback" in why and "generic" in why


def test_pick_fallback_with_only_generic_candidates():
    t = table((None, ["sm90_*"]))
    cands = [inst("generic_dense_c"), inst("generic_dense_a"), inst("generic_dense_b")]
    for perm in itertools.permutations(cands):
        assert dispatch._pick(t, 0, list(perm))[0].name == "generic_dense_a"


def test_pick_fallback_uses_the_backend_field_not_the_name():
    t = table((None, ["nothing"]))
    cands = [inst("a_generic_named", backend="generic"), inst("z_fast", backend="sm90")]
    assert dispatch._pick(t, 0, cands)[0].name == "z_fast"


# ---- table matching -----------------------------------------------------------------------------


def test_table_for_matches_device_facts():
    h100 = dispatch.load_table(table((None, ["sm90_*"]), name="h100", match={"cc": [90], "sms": 132}))
    a100 = dispatch.load_table(table((None, ["sm80_*"]), name="a100", match={"name_contains": "a100"}))
    assert dispatch._table_for(90, 132, "NVIDIA H100 80GB HBM3") is h100
    assert dispatch._table_for(90, 114, "NVIDIA H100 PCIe")["name"] == "default"  # other SM count
    assert dispatch._table_for(80, 108, "NVIDIA A100-SXM4-80GB") is a100  # case-insensitive
    assert dispatch._table_for(100, 148, "NVIDIA B200")["name"] == "default"


@pytest.mark.parametrize("cc,name", [(80, "sm80"), (86, "sm86"), (87, "sm86"), (89, "sm89"), (90, "default")])
def test_builtin_tables_per_architecture(cc, name):
    # sm_80 / sm_86 / sm_89 have tables of their own whatever the SM count; an sm_90 part other
    # than the 132-SM H200 takes the default one.
    for sms in (56, 84, 142):
        assert dispatch._table_for(cc, sms, "a GPU")["name"] == name


def test_newer_user_table_wins():
    dispatch.load_table(table((None, ["old"]), name="old"))
    dispatch.load_table(table((None, ["new"]), name="new"))
    assert dispatch._table_for(90, 132, "any")["name"] == "new"


# ---- force, choose on the CPU, reset ------------------------------------------------------------


def test_force_unknown_instance_names_it():
    with pytest.raises(KeyError, match="no compiled instance is named 'generic_dense_no_such_thing'"):
        dispatch.force("generic_dense_no_such_thing")
    assert dispatch._forced is None


def test_force_known_instance_and_back():
    name = registry.instances()[0].name
    dispatch.force(name)
    assert dispatch._forced == name
    dispatch.force(None)
    assert dispatch._forced is None


def test_choose_on_cpu_explains_that_instances_run_on_cuda():
    with pytest.raises(ValueError, match=r"instances run on CUDA devices; cpu uses the CPU reference"):
        dispatch.choose("a-bf16_w-u4g128-sbf16_c-bf16", 4096, 4096, 8, device="cpu")
    with pytest.raises(ValueError, match=r"instances run on CUDA devices"):
        dispatch.explain("a-bf16_w-u4g128-sbf16_c-bf16", 4096, 4096, 8, device="cpu")


def test_choose_rejects_a_bad_format_first():
    from humming_aot.formats import FormatError

    with pytest.raises(FormatError, match="cannot parse GEMM format"):
        dispatch.choose("bf16 x u4", 4096, 4096, 8, device="cpu")


@pytest.mark.parametrize(
    "n,k,layout,message",
    [
        (-1, 96, 1, r"extents must be positive, got n=-1, k=96"),
        (4096, 0, 3, r"extents must be positive, got n=4096, k=0"),
        (4096, 4096, 1 << 40, r"unknown weight layout id 1099511627776; layout ids: 1 \(generic\)"),
    ],
)
def test_bad_extents_and_layouts_are_named_before_any_table_lookup(n, k, layout, message):
    # (A negative n found no range of the table: an IndexError. A layout id beyond int32 reached the
    # C++ binding: a TypeError listing its overloads. Both were seen on the GPU through auto_gemm.)
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    with pytest.raises(ValueError, match=message):
        dispatch.choose_for(fmt, n, k, 8, cc=90, sms=132, layout=layout)
    with pytest.raises(ValueError, match=message):
        dispatch.layer_plan(fmt, n, k, layout)


def test_reset_clears_tables_forced_instance_and_cache():
    dispatch.load_table(table((None, ["x*"])))
    dispatch.force(registry.instances()[0].name)
    dispatch._cache[("key",)] = "value"
    dispatch.reset()
    assert dispatch._user_tables == []
    assert dispatch._forced is None
    assert dispatch._cache == {}
    assert dispatch._table_for(100, 148, "any")["name"] == "default"  # the loaded one is gone


def test_load_table_and_force_clear_the_cache():
    dispatch._cache[("key",)] = "value"
    dispatch.load_table(table((None, ["x*"])))
    assert dispatch._cache == {}
    dispatch._cache[("key",)] = "value"
    dispatch.force(None)
    assert dispatch._cache == {}


# ---- the C++ default choice follows the same tables --------------------------------------------


def _build_formats():
    """One GEMM format per compiled instance key (representative group sizes where any is taken)."""
    out = set()
    for inst in registry.instances():
        code = F.dtype(inst.code_type)
        if inst.scale_type == "none":
            w = F.WeightFormat(code)
        else:
            gk = inst.group_k if inst.group_k >= 0 else (32 if inst.scale_type == "e8m0" else 128)
            w = F.WeightFormat(code, gk, 1, F.dtype(inst.scale_type), inst.zero)
        act = inst.act_type if inst.act_type in ("bf16", "f16") else f"{inst.act_type}-pt"
        out.add((str(F.GemmFormat(act, w, inst.out_type)), inst.layout))
    return sorted(out)


def test_two_block_tiles_are_default_only_where_the_table_costs_them():
    """The sm90 weight-only tiles of two 64-channel blocks a consumer warpgroup (Blocks = 2):
    dispatch.two_blocks (like registry.cpp's) tells them from a registry entry's channels and
    threads exactly where the generator's template argument says two blocks, for every instance of
    this build; and where the build has one (CI's ci+experimental: the dense t176x256x64, whose cost
    the H200 table has), both languages' default choice over a grid of layers and M is the same, and
    a two-block choice is either one the table costs or the only instance of the build that runs the
    problem (a filtered build); every two-block tile still runs by name (instance=)."""
    import importlib.util
    import pathlib
    import sys

    from humming_aot._ext import C

    path = pathlib.Path(__file__).resolve().parents[1] / "tools" / "gen_instances.py"
    spec = importlib.util.spec_from_file_location("gen_instances_two_blocks", path)
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen  # its dataclasses look their module up there
    spec.loader.exec_module(gen)
    every = {i.name: i for i in gen.enumerate_instances(["80", "90a"], "full+experimental")}
    built = registry.instances()
    assert built and all(i.name in every for i in built)
    for inst in built:
        g = every[inst.name]
        blocks = int(g.template_args[6]) if g.header.endswith("sm90_dense.cuh") else 1
        assert dispatch.two_blocks(inst) == (blocks == 2), inst.name
    table = next(t for t in gen.dispatch_tables() if t["name"] == "h200")
    costs = dispatch._tile_costs(table)
    dispatch.reset()
    taken = set()
    for inst in (i for i in built if dispatch.two_blocks(i) and i.scheduler == "dense"):
        fmt = next(
            f for f, layout in _build_formats() if layout == inst.layout and inst.name.split("_t")[0].endswith(f)
        )
        others = [i.name for i in built if not dispatch.two_blocks(i) and i.layout == inst.layout and "90a" in i.archs]
        for m, n, k in itertools.product((64, 1024, 4096, 16384), (4096, 28672), (4096, 8192)):
            py = dispatch.choose_for(fmt, n, k, m, cc=90, sms=132, layout=inst.layout)
            assert C.select_instance(fmt, inst.layout, n, k, m, 90, 132) == py
            chosen = next(i for i in built if i.name == py)
            if dispatch.two_blocks(chosen):
                taken.add(py)
                if dispatch._cost_for(costs, chosen) is None:
                    # Uncosted: only where no other instance of this build runs the problem.
                    runs = [o for o in others if C.check_instance(o, fmt, inst.layout, n, k, m)[0]]
                    assert not runs, (fmt, m, n, k, py, runs)
        assert C.check_instance(inst.name, fmt, inst.layout, 4096, 4096, 1024)[0], inst.name
    # The costed tile is weighed, not only admitted: over this grid its estimate wins somewhere
    # (m = 4096 and 16384, beside t128x128x128 and t256x128x64 in a dev build; from the H200
    # table's costs) wherever the build has it.
    if any(i.scheduler == "dense" and tuple(i.tile) == (176, 256, 64) for i in built):
        assert any("_t176x256x64_" in name for name in taken), "no default choice over the grid is t176x256x64"


@pytest.mark.parametrize("cc,sms", [(90, 132), (90, 114), (89, 142), (86, 84), (80, 108)])
def test_cpp_default_choice_equals_python_choice(cc, sms):
    from humming_aot._ext import C

    dispatch.reset()
    checked = refused = 0
    for fmt, layout in _build_formats():
        # (Wide-layer ranges by n, shallow-layer ranges by k: the H200 table's k_max are 4096 and 8192.)
        for m, n, k in itertools.product(
            (1, 16, 17, 64, 65, 128, 4096), (4096 + 64, 6144, 12288, 28672), (4096, 8192, 8192 + 128)
        ):
            try:
                py = dispatch.choose_for(fmt, n, k, m, cc=cc, sms=sms, layout=layout)
            except dispatch.DispatchError as e:
                with pytest.raises(ValueError, match="no compiled instance computes"):
                    C.select_instance(fmt, layout, n, k, m, cc, sms)
                assert "no compiled instance" in str(e)
                refused += 1
                continue
            assert C.select_instance(fmt, layout, n, k, m, cc, sms) == py, (fmt, m, n, k, cc, sms)
            checked += 1
    # A build with machine code for this device class chooses for it; one without (e.g. a 90a-only
    # build asked about sm_86) refuses every format in both languages.
    covered, why = registry.device_covered(cc)
    if covered:
        assert checked > 0, why
    else:
        assert checked == 0 and refused > 0, why


def test_compiled_tables_are_the_python_tables():
    from humming_aot._ext import C  # noqa: F401  (the registry of this build)
    import json
    import pathlib

    names = [
        json.loads(p.read_text())["name"]
        for p in sorted((pathlib.Path(dispatch.__file__).parent / "tables").glob("*.json"))
    ]
    assert [t["name"] for t in dispatch._BUILTIN] == sorted(names, key=lambda n: n == "default")


def test_table_patterns_are_limited_to_shared_wildcards():
    with pytest.raises(ValueError, match="wildcards"):
        dispatch.load_table({"ranges": [{"m_max": None, "prefer": ["sm80_[ab]*"]}]})


def test_devices_with_less_shared_memory_get_instances_that_fit():
    """sm_86 / sm_89 give a block at most 99 KiB of shared memory: instances needing more do not
    'run on' them (with the reason), and the default choice for every format fits."""
    limit = 101376
    for inst in registry.instances():
        ok, why = registry.runs_on(inst.name, 86)
        if inst.smem_bytes > limit:
            assert not ok and "shared memory" in why, (inst.name, why)
        ok90, _ = registry.runs_on(inst.name, 90)
        if "90" in inst.archs or "90a" in inst.archs:
            assert ok90, inst.name  # the H200 gives 227 KiB: every instance built for it fits
    dispatch.reset()
    chosen = 0
    for fmt, layout in _build_formats():
        for m in (1, 16, 64, 4096):
            try:
                name = dispatch.choose_for(fmt, 4096, 4096, m, cc=86, sms=84, layout=layout)
            except dispatch.DispatchError:
                continue
            assert registry.find(name).smem_bytes <= limit, (fmt, m, name)
            chosen += 1
    # A build with machine code for sm_86 (CI's) has choices to check; one built for sm_90a alone
    # (the GPU machine's) has none, and the loop above checked that nothing unfit was chosen.
    if any(registry.runs_on(i.name, 86)[0] for i in registry.instances()):
        assert chosen > 0


def test_h200_ranges_say_why_and_explain_repeats_it(monkeypatch):
    """Every range of the measured H200 table records the measurement behind its order, and
    explain() prints the one of the range it used; a 'why' that is not a sentence is refused."""
    from humming_aot import dispatch

    table = next(t for t in dispatch._BUILTIN if t["name"] == "h200")
    assert all(isinstance(r.get("why"), str) and r["why"].strip() for r in table["ranges"])
    monkeypatch.setattr(dispatch, "_device_facts", lambda device=None: (90, 132, "NVIDIA H200"))
    text = dispatch.explain("a-bf16_w-u4g128-sbf16_c-bf16", 28672, 8192, 64, layout=3)
    r = table["ranges"][dispatch._range_index(table, 64, 28672, 8192)]
    assert f"why this order: {r['why']}" in text
    bad = {"ranges": [{"m_max": None, "prefer": ["*"], "why": ""}]}
    with pytest.raises(ValueError, match="why"):
        dispatch.load_table(bad)


# ---- the layout a layer packs for -----------------------------------------------------------------


@pytest.mark.parametrize("wfmt,act", [("u4g128-sbf16", "bf16"), ("u8gc-sf16-zi", "f16"), ("e2m1gc-sbf16", "e4m3-pt")])
def test_preferred_layout_needs_an_instance_for_the_shape(wfmt, act):
    """On an H200 (described, no GPU needed) a layer packs for the first layout of the table's
    order that a fast instance of this build reads, computes the format with and can run the
    layer's shape with; a shape no fast instance takes (77 inputs) gets the generic layout.
    Formats with 8-bit activations count too: W4A8 packs for layout 4 (sm90a8) where this build
    has such an instance (the ci build has one, for e2m1gc x e4m3-pt)."""
    g = F.parse_gemm_format(f"a-{act}_w-{wfmt}_c-{'bf16' if act == 'e4m3-pt' else act}")
    table = dispatch._table_for(90, 132, "NVIDIA H200")
    ids = pack.LAYOUTS

    def fast_layouts(n, k):
        return {
            i.layout
            for i in registry.instances()
            if i.backend != "generic"
            and dispatch._computes(i, g)
            and registry.runs_on(i.name, 90)[0]
            and dispatch.C.check_instance(i.name, str(g), i.layout, n, k, 1)[0]
        }

    for n, k, expect_fast in ((4096, 4096, True), (40, 77, False)):
        have = fast_layouts(n, k)
        want = next((ids[lay] for lay in table.get("layouts", []) if ids[lay] in have), min(have, default=1))
        got = dispatch._preferred_layout_for(g, 90, 132, "NVIDIA H200", n, k)
        assert got == want, (n, k, have)
        if not expect_fast:
            assert got == 1 and not have
    # Without a shape, the choice is the format's alone (as before: any fast layout counts).
    assert dispatch._preferred_layout_for(g, 90, 132, "NVIDIA H200", None, None) == dispatch._preferred_layout_for(
        g, 90, 132, "NVIDIA H200", 4096, 4096
    )


@pytest.mark.parametrize("cc,family", [(100, "sm100"), (120, "sm120"), (86, "sm80")])
def test_uncovered_device_names_the_build_to_install(cc, family):
    """On a device this build has no machine code for, the first op's error says which family's
    build covers it (and how to make one); on a covered one, the choice succeeds."""
    covered, why = registry.device_covered(cc)
    fmt = "a-bf16_w-u4g128-sbf16_c-bf16"
    if covered:
        assert dispatch.choose_for(fmt, 4096, 4096, 1, cc=cc, sms=100)
        return
    assert f"the {family} family" in why and f"HUMMING_CUDA_ARCHS='{registry.FAMILY_ARCHS[family]}'" in why
    with pytest.raises(dispatch.DispatchError, match=f"no compiled instance runs on sm_{cc}:.*{family} family"):
        dispatch.choose_for(fmt, 4096, 4096, 1, cc=cc, sms=100)


def test_device_of_no_family_is_named():
    covered, why = registry.device_covered(75)
    assert not covered and "sm_75 belongs to no family" in why


# ---- estimate ranges: the launch facts the tile costs read -------------------------------------

FMT90 = "a-bf16_w-u4g128-sbf16_c-bf16"


def test_launch_facts_follow_the_persistent_plan(monkeypatch):
    from humming_aot._ext import C

    def lf(*problem):  # the facts of an sm90 launch
        return C.persistent_launch_facts("sm90", *problem)

    # 2 x 64 = 128 tiles of 64 x 128 on 132 multiprocessors, K = 8192: too many 64-token tiles to
    # split K (two multiprocessors per tile would be needed), so each block takes one whole tile.
    assert lf(64, 128, 128, FMT90, 3, 8192, 8192, 128, 132) == (8192, 1, False, 0, False)
    # 264 such tiles (n = 132 x 128): exactly two waves, each block two whole tiles.
    assert lf(64, 128, 128, FMT90, 3, 132 * 128, 8192, 128, 132) == (16384, 2, False, 0, False)
    # 80 decode tiles: spread over the multiprocessors by K (stream-K), so the busiest block takes
    # less than a whole tile's K, in at most two segments (the ends of two tiles); a block's share
    # (38 or 39 of the 5120 K tiles) is shorter than a tile's 64, so some tile has three
    # contributors, none four: the one that finishes it adds two partials.
    inputs, segments, stream_k, partials, apart = lf(8, 128, 128, FMT90, 3, 80 * 128, 8192, 8, 132)
    assert stream_k and 8192 * 80 / 132 <= inputs < 8192 and 1 <= segments <= 2 and partials == 2 and not apart
    # 100 decode tiles keep three quarters of the multiprocessors busy: whole tiles, no partials.
    assert lf(8, 128, 128, FMT90, 3, 100 * 128, 8192, 8, 132) == (8192, 1, False, 0, False)
    # 1536 x 7168 at m = 100 in t128: 12 tiles of 56 K tiles, each split evenly over 132 / 12 = 11
    # blocks (5 or 6 K tiles each, above the 512-input minimum): the last of 11 adds 10 partials.
    assert lf(128, 128, 128, FMT90, 3, 1536, 7168, 100, 132) == (768, 1, True, 10, False)
    # The 8-bit activation kernels plan the same way (generic layout, K tiles rounded up: k = 8192 + 32
    # takes 65 K tiles of 128 inputs, as a weight-only k of 65 x 128 does; one row of 64 tiles, which
    # both spread).
    a8 = "a-e4m3-pt_w-e4m3gc-sf32_c-bf16"
    assert lf(64, 128, 128, a8, 1, 8192, 8192, 128, 132) == (8192, 1, False, 0, False)
    assert lf(64, 128, 128, a8, 1, 8192, 8192 + 32, 64, 132) == lf(64, 128, 128, FMT90, 3, 8192, 65 * 128, 64, 132)
    assert lf(64, 128, 128, a8, 1, 8192, 8192 + 32, 64, 132)[2]
    # 80 t128 tiles over K = 13824 (5120 x 13824 at m = 256): the weight-only kernels spread them
    # (streamk.h, HeavySpread::kWide: 66 K tiles at most a block, where a whole tile has 108); the
    # W4A8 ones keep whole tiles (HeavySpread::kHalf spreads at most 66 tiles). The weight-only
    # spread's two rows are apart (80 tiles over 132 blocks in grouped order), which only W8A8 pays.
    assert lf(128, 128, 128, FMT90, 3, 5120, 13824, 256, 132) == (66 * 128, 1, True, 2, True)
    a8w4 = "a-e4m3-pt_w-e2m1gc-sbf16_c-bf16"
    assert lf(128, 128, 128, a8w4, 4, 5120, 13824, 256, 132) == (13824, 1, False, 0, False)
    # 40 tiles at m = 128: the W4A8 kernels spread them, three blocks a tile (36 K tiles each, two
    # partials for the first); 8-bit codes and integer activations keep whole tiles
    # (streamk.h, a8_heavy_spread).
    assert lf(128, 128, 128, a8w4, 4, 5120, 13824, 128, 132) == (36 * 128, 1, True, 2, False)
    assert lf(128, 128, 128, a8, 1, 5120, 13824, 128, 132) == (13824, 1, False, 0, False)
    a8i4 = "a-i8-pt_w-i4gc-sbf16_c-bf16"
    assert lf(128, 128, 128, a8i4, 1, 5120, 13824, 128, 132) == (13824, 1, False, 0, False)
    # Rows of tiles apart: four rows of 28 t16 tiles over K = 3584 (3584 x 3584 at m = 64) spread
    # unevenly over 132 blocks, walked in step (the default) or in grouped order; one row of them
    # (m = 16) or three blocks a tile (3584 x 18944 at m = 128: 38 t64x192 tiles on 114 blocks) are
    # not, nor (whole tiles: the W8A8 kernels spread mid tiles only where at most half the
    # multiprocessors would have one, streamk.h MidSpread::kDeep) two rows of 38 t64x192 tiles over
    # K = 16384 (7168 x 16384 at m = 128), which the other 8-bit kernels still spread.
    w8 = "a-e4m3-pt_w-e4m3gc-sf32_c-bf16"
    assert lf(16, 128, 128, w8, 1, 3584, 3584, 64, 132) == (24 * 128, 2, True, 2, True)
    assert not lf(16, 128, 128, w8, 1, 3584, 3584, 16, 132)[4]
    assert not lf(64, 192, 128, w8, 1, 3584, 18944, 128, 132)[4]
    assert lf(64, 192, 128, w8, 1, 7168, 16384, 128, 132) == (16384, 1, False, 0, False)
    assert lf(64, 128, 128, a8i4, 1, 7168, 16384, 128, 132)[2]
    monkeypatch.setenv("HUMMING_LOCKSTEP_ROWS", "0")  # read at each plan
    assert lf(16, 128, 128, w8, 1, 3584, 3584, 64, 132)[4]
    monkeypatch.delenv("HUMMING_LOCKSTEP_ROWS")
    # Other kernels are not covered by the model.
    assert C.persistent_launch_facts("sm80", 64, 128, 128, FMT90, 2, 8192, 8192, 128, 132) is None


def test_persistent_max_waves_setting_spreads_the_tail_of_longer_launches():
    """HUMMING_PERSISTENT_MAX_WAVES (read once per process, so each setting in its own): the FP8
    block tile t192n128s4 on 7168 x 16384 at m = 4096 has 56 x 22 = 1232 tiles, 9 whole waves on 132
    multiprocessors and 44 tiles over; with a limit of 8 waves its last wave keeps two thirds of the
    blocks idle (10 whole tiles for the busiest), while the default limit of 64 spreads those 44
    tiles' K over every block (stream-K): 9 whole tiles and a share of 42 or 43 K tiles each; a
    launch of more whole waves than the limit keeps its tail."""
    import ast
    import os
    import subprocess
    import sys

    code = (
        "from humming_aot._ext import C; print(C.persistent_launch_facts('sm90', 192, 128, 128, "
        "'a-e4m3-g128_w-e4m3g128n128-sf32_c-bf16', 1, 7168, 16384, 4096, 132))"
    )

    def facts(waves):
        env = {k: v for k, v in os.environ.items() if k != "HUMMING_PERSISTENT_MAX_WAVES"}
        if waves is not None:
            env["HUMMING_PERSISTENT_MAX_WAVES"] = str(waves)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return ast.literal_eval(out.stdout.strip())

    assert facts(8) == (10 * 16384, 10, False, 0, False)
    assert facts(10) == facts(None) == facts(64)
    inputs, segments, stream_k, partials, _ = facts(None)
    assert stream_k and 9 * 16384 + 42 * 128 <= inputs <= 9 * 16384 + 44 * 128 and segments in (10, 11)
    assert 1 <= partials <= 3  # 128 K tiles of a tile over blocks of 42 or 43: three or four contributors


def test_estimate_ranges_pick_the_lowest_estimate_and_keep_patterns_for_the_rest():
    import types

    table = {
        "name": "t",
        "tile_costs": {"64x128x128": [0.0, 1.0, 0.0, 0.0], "128x128x128": [0.0, 1.0, 0.0, 0.0]},
        "ranges": [{"m_max": None, "estimate": True, "prefer": ["sm90_*_t128x*", "sm80_*"]}],
    }
    table = dispatch._validate_table(table, "t")

    def inst(name, backend, tile):
        return types.SimpleNamespace(name=name, backend=backend, tile=tile)

    t64 = inst(f"sm90_wgmma_dense_{FMT90}_t64x128x128", "sm90", (64, 128, 128))
    t128 = inst(f"sm90_wgmma_dense_{FMT90}_t128x128x128", "sm90", (128, 128, 128))
    sm80 = inst(f"sm80_mma_dense_{FMT90}_t64x128x64", "sm80", (64, 128, 64))
    g = F.parse_gemm_format(FMT90)
    # m = 128 on 12288 x 8192: t64 has 192 tiles (a wave and a spread tail: 8192 + 3840 inputs for
    # the busiest block), t128 96 of one block each (8192); equal costs per input: t128.
    pick, why = dispatch._pick(table, 0, [t64, t128, sm80], (g, 12288, 8192, 128, 132, 3))
    assert pick is t128 and "estimated" in why
    # 8192 x 8192 at m = 128: t128's 64 tiles spread over K (scheduler/streamk.h, HeavySpread:
    # 4096 inputs per block) where t64's 128 tiles take one block each (8192 inputs).
    est = dict((i.tile[0], us) for us, i in dispatch._estimates(table, [t128, t64], (g, 8192, 8192, 128, 132, 3)))
    assert est == {128: pytest.approx(4.096), 64: pytest.approx(8.192)}
    # 264 tiles of t64 (two waves) against 132 of t128 (one): the estimate takes t128.
    assert dispatch._pick(table, 0, [t64, t128], (g, 132 * 128, 8192, 128, 132, 3))[0] is t128
    # Candidates at most twice as tall as the lowest tile that holds m (registry.cpp,
    # kEstimateMaxPad): with t128 estimated far cheaper than the others, at m = 32 (t32 holds it)
    # it is still left out and t64 stays in; at m = 64 (t64 holds it) it is in, and chosen.
    t32 = inst(f"sm90_wgmma_dense_{FMT90}_t32x128x128", "sm90", (32, 128, 128))
    pad = dispatch._validate_table(
        dict(
            table,
            tile_costs={"32x128x128": [0, 1, 0, 0], "64x128x128": [0, 1, 0, 0], "128x128x128": [0, 0.001, 0, 0]},
        ),
        "pad",
    )
    est = dispatch._estimates(pad, [t32, t64, t128], (g, 132 * 128, 8192, 32, 132, 3))
    assert [i.tile[0] for _, i in est] == [32, 64]
    assert dispatch._pick(pad, 0, [t32, t64, t128], (g, 132 * 128, 8192, 64, 132, 3))[0] is t128
    # No covered candidate: the patterns decide.
    assert dispatch._pick(table, 0, [sm80], (g, 8192, 8192, 128, 132, 3))[0] is sm80
    # A fit that extrapolates to a time that is not positive leaves its tile out (as registry.cpp's
    # estimated_choice does; a negative estimate once won there in Python only): t64's -1.8 us
    # (-10 + 1 per thousand inputs, 8192 of them) loses to t128's 4.1.
    neg = dispatch._validate_table(
        dict(table, tile_costs={"64x128x128": [-10.0, 1.0, 0.0, 0.0], "128x128x128": [0.0, 1.0, 0.0, 0.0]}), "neg"
    )
    est = dispatch._estimates(neg, [t128, t64], (g, 8192, 8192, 128, 132, 3))
    assert [i for _, i in est] == [t128] and est[0][0] == pytest.approx(4.096)
    assert dispatch._pick(neg, 0, [t64, t128], (g, 8192, 8192, 128, 132, 3))[0] is t128
    with pytest.raises(ValueError, match="tile_costs"):
        dispatch._validate_table({"ranges": [{"m_max": None, "estimate": True, "prefer": []}]}, "bad")
    with pytest.raises(ValueError, match="tile_costs"):
        dispatch._validate_table(
            {"tile_costs": {"a4w4:64x128x128": [1, 2, 3, 4]}, "ranges": [{"m_max": None, "prefer": []}]}, "bad"
        )
    with pytest.raises(ValueError, match="tile_costs"):
        dispatch._validate_table(
            {"tile_costs": {"64x128": [1, 2, 3, 4]}, "ranges": [{"m_max": None, "prefer": []}]}, "bad"
        )
    # A fifth number prices each partial of the most split tile's fix-up: 1536 x 7168 at m = 100,
    # t128's 12 tiles over 11 blocks each (768 inputs for the busiest, 10 partials for a tile's last
    # contributor); t64's 24 tiles over 5 blocks each (1536 inputs, 4 partials).
    five = dispatch._validate_table(
        dict(table, tile_costs={"64x128x128": [0.0, 1.0, 0.0, 0.0, 0.5], "128x128x128": [0.0, 1.0, 0.0, 0.0, 0.5]}),
        "five",
    )
    est = dict((i.tile[0], us) for us, i in dispatch._estimates(five, [t128, t64], (g, 1536, 7168, 100, 132, 3)))
    assert est == {128: pytest.approx(0.768 + 5.0), 64: pytest.approx(1.536 + 2.0)}
    assert dispatch._pick(five, 0, [t128, t64], (g, 1536, 7168, 100, 132, 3))[0] is t64
    with pytest.raises(ValueError, match="4 or 5"):
        dispatch._validate_table(
            {"tile_costs": {"64x128x128": [1, 2, 3, 4, 5, 6]}, "ranges": [{"m_max": None, "prefer": []}]}, "bad"
        )


def test_tile_costs_of_a_kernel_class_cover_only_it():
    """A key without a class ("BMxBNxBK") covers the weight-only kernels (16-bit activations) of any
    code width; "a8w4:..." only 8-bit activations with 4-bit codes, "a16w8:..." the weight-only ones
    with 8-bit codes, ahead of the plain key; "_b2" a batch-2 tile and nothing else."""
    import types

    table = dispatch._validate_table(
        {
            "name": "t",
            "tile_costs": {
                "16x128x128": [1.0, 0.0, 0.0, 0.0],
                "a16w8:16x128x128": [2.0, 0.0, 0.0, 0.0],
                "a8w4:16x128x128": [3.0, 0.0, 0.0, 0.0],
                "a8w4:16x128x128_b2": [4.0, 0.0, 0.0, 0.0],
            },
            "ranges": [{"m_max": None, "estimate": True, "prefer": []}],
        },
        "t",
    )
    costs = dispatch._tile_costs(table)

    def cost(fmt, suffix=""):
        name = f"sm90_wgmma_dense_{fmt}_t16x128x128_w1x2x1_s8{suffix}"
        c = dispatch._cost_for(costs, types.SimpleNamespace(name=name, tile=(16, 128, 128)))
        return None if c is None else c[0]

    assert cost("a-bf16_w-u4g128-sbf16_c-bf16") == 1.0
    assert cost("a-f16_w-u8gc-sf16-zi_c-f16") == 2.0
    assert cost("a-e4m3-pt_w-u4g128-sbf16_c-bf16") == 3.0
    assert cost("a-e4m3-pt_w-u4g128-sbf16_c-bf16", "_b2") == 4.0
    # The batch part is read where later parts follow it (layout-4 tiles end "_b2_l4"); "_b4" has
    # no key, so a batch-4 tile is outside the model rather than costed as its unbatched twin.
    assert cost("a-e4m3-pt_w-u4g128-sbf16_c-bf16", "_b2_l4") == 4.0
    assert cost("a-e4m3-pt_w-u4g128-sbf16_c-bf16", "_l4") == 3.0
    assert cost("a-e4m3-pt_w-u4g128-sbf16_c-bf16", "_b4_l4") is None
    assert cost("a-e4m3-pt_w-e4m3gc-sf32_c-bf16") is None  # a8w8: no cost of its class, none of another
    assert cost("a-bf16_w-u4g128-sbf16_c-bf16", "_b2") is None
    generic = types.SimpleNamespace(name="generic_dense_a-bf16_w-u4-sbf16_c-bf16", tile=(1, 1, 1))
    assert dispatch._cost_for(costs, generic) is None


# ---- the sm80 family's 8-bit activation kernels (kernel/sm80_a8_dense.cuh) ------------------------

_SM80_A8 = [i for i in registry.instances() if i.backend == "sm80" and i.act_type in ("e4m3", "e5m2", "i8")]


@pytest.mark.skipif(not _SM80_A8, reason="this build has no sm80 8-bit activation instance (a +experimental profile)")
def test_sm80_a8_instances_take_w8a8_in_the_generic_layout_and_say_what_they_refuse():
    """An sm80 W8A8 instance accepts its format on the generic layout for any n and k a multiple of
    16, and refuses, naming what it takes: a weight packed for another layout, activation scales per
    K group, weight scales per K group, k not a multiple of 16, and (integers) more inputs than keep
    the s32 sums exact. On a described sm_89 device its format gets a layout and, where the table's
    patterns reach it, the instance rather than the generic backend; FP8 ones never run on sm_80 /
    sm_86 (no FP8 mma there)."""
    from humming_aot._ext import C

    for inst in _SM80_A8:
        blocks = inst.act_granularity == 2  # DeepSeek-style blocks: activation scales per 128 inputs
        gran = "gc" if inst.group_k == 0 else f"g{inst.group_k}" + (f"n{inst.group_n}" if blocks else "")
        agran = f"g{inst.group_k}" if blocks else "pt"
        fmt = f"a-{inst.act_type}-{agran}_w-{inst.code_type}{gran}-s{inst.scale_type}_c-{inst.out_type}"
        assert C.check_instance(inst.name, fmt, 1, 520, 3072 + 16, 7) == (True, "")
        ok, why = C.check_instance(inst.name, fmt, 2, 520, 3072, 7)
        assert not ok and "layout 1 (generic)" in why and "layout 2" in why, why
        block_fmt = f"a-{inst.act_type}-g128_w-{inst.code_type}g128n128-sf32_c-{inst.out_type}"
        if inst.act_type != "i8" and inst.code_type == "e4m3":
            other = fmt.replace("-g128_", "-pt_").replace("g128n128", "gc") if blocks else block_fmt
            ok, why = C.check_instance(inst.name, other, 1, 520, 3072, 7)
            assert not ok and "activation scale granularity" in why, why
        if inst.group_k and not blocks:  # the same codes with one scale per channel: another instance's format
            other = fmt.replace(f"{inst.code_type}g{inst.group_k}-", f"{inst.code_type}gc-")
            ok, why = C.check_instance(inst.name, other, 1, 520, 3072, 7)
            assert not ok and "group" in why, why
        ok, why = C.check_instance(inst.name, fmt, 1, 520, 3072 + 8, 7)
        assert not ok and "multiple of 16" in why and "k=3080" in why, why
        if inst.act_type == "i8":
            ok, why = C.check_instance(inst.name, fmt, 1, 8, 131072 + 32, 1)
            assert not ok and "131072" in why, why
        fp8 = inst.act_type != "i8"
        assert registry.runs_on(inst.name, 89)[0] or "89" not in inst.archs
        for cc in (80, 86):
            assert registry.runs_on(inst.name, cc)[0] == (not fp8 and "80" in inst.archs), (inst.name, cc)
        if "89" in inst.archs or "80" in inst.archs:
            assert dispatch._preferred_layout_for(F.parse_gemm_format(fmt), 89, 142, "", 4096, 4096) == 1


def test_h200_table_takes_the_spread_w4a8_t128_over_the_deepest_layers():
    """W4A8 t128 launches of at most half as many tiles as multiprocessors over a deep K spread over
    K (scheduler/streamk.h, HeavySpread::kHalf) and the estimates read that plan: on 8192 x 28672
    (Llama-3-70B down) at m = 96 and 128, one row of 64 tiles, two blocks each with half the K, is
    estimated below t64's two rows of whole tiles, where with whole t128 tiles it was not."""
    import types

    from humming_aot._ext import C

    table = dispatch._table_for(90, 132, "NVIDIA H200")
    fmt = "a-e4m3-pt_w-e2m1gc-sbf16_c-bf16"
    cands = [
        types.SimpleNamespace(
            name=f"sm90_wgmma_dense_{fmt}_t{t}_l4", backend="sm90", tile=tuple(map(int, t.split("x")))
        )
        for t in ("32x128x128", "64x128x128", "128x128x128")
    ]
    for m in (96, 128):
        est = {i.tile[0]: us for us, i in dispatch._estimates(table, cands, (fmt, 8192, 28672, m, 132, 4))}
        assert est[128] < min(est[32], est[64]), (m, est)
    spread = C.persistent_launch_facts("sm90", 128, 128, 128, fmt, 4, 8192, 28672, 128, 132)
    assert spread == (112 * 128, 1, True, 1, False)


def test_h200_estimates_charge_w8a8_launches_whose_rows_are_apart():
    """A W8A8 launch whose rows of tiles spread unevenly (persistent_launch_facts' fifth fact) is
    estimated at 1 + humming.h kRowsApartPenalty8 times its tile cost's time, so on deep layers at
    m = 96 to 256 the H200 table takes no such launch (session 18's sweep: t64x192 spread over two
    rows 1.4-1.6x slower than t128 there; since session 56 two rows of t64 over a deep K keep
    whole tiles, streamk.h MidSpread::kDeep, and four still spread); a W4A8 launch of the same plan
    is not charged."""
    import types

    from humming_aot._ext import C

    table = dispatch._table_for(90, 132, "NVIDIA H200")
    costs = dispatch._tile_costs(table)
    w8 = "a-e4m3-pt_w-e4m3gc-sf32_c-bf16"
    tiles = ("32x128x128", "64x128x128", "64x192x128", "128x128x128", "128x192x128")
    cands = [
        types.SimpleNamespace(name=f"sm90_wgmma_dense_{w8}_t{t}", backend="sm90", tile=tuple(map(int, t.split("x"))))
        for t in tiles
    ]
    g = F.parse_gemm_format(w8)
    for n, k, m in ((7168, 16384, 128), (8192, 28672, 128), (8192, 28672, 96), (3584, 18944, 256), (4096, 14336, 256)):
        est = {i.tile: us for us, i in dispatch._estimates(table, cands, (g, n, k, m, 132, 1))}
        pick = min(est, key=est.get)
        assert not C.persistent_launch_facts("sm90", *pick, w8, 1, n, k, m, 132)[4], (n, k, m, est)
    # Four rows of t64x192 tiles over K = 18944 (3584 x 18944 at m = 256, 76 tiles) spread unevenly:
    # charged, and t128 taken there.
    inputs, segments, stream_k, partials, apart = C.persistent_launch_facts(
        "sm90", 64, 192, 128, w8, 1, 3584, 18944, 256, 132
    )
    c = costs[("a8w8", (64, 192, 128), 1)]
    assert apart
    plain = c[0] + c[1] * inputs / 1000 + c[2] * segments + c[3] * stream_k + (c[4] * partials if len(c) > 4 else 0)
    got = dispatch.estimated_us(c, "sm90", (64, 192, 128), g, 3584, 18944, 256, 132, 1)
    assert got == pytest.approx(plain * (1 + C.rows_apart_penalty_8))
    # W4A8 (4-bit codes): the same two rows of t64x128 tiles apart, not charged.
    w4 = "a-e4m3-pt_w-e2m1gc-sbf16_c-bf16"
    facts = C.persistent_launch_facts("sm90", 64, 128, 128, w4, 4, 7168, 16384, 128, 132)
    c4 = [1.0, 1.0, 1.0, 1.0, 1.0]
    plain4 = 1 + facts[0] / 1000 + facts[1] + facts[2] + facts[3]
    assert facts[4] and dispatch.estimated_us(
        c4, "sm90", (64, 128, 128), w4, 7168, 16384, 128, 132, 4
    ) == pytest.approx(plain4)
