"""Recipes (``xstage-trace instrument list|check|apply``): anchors found by shape, drift named with
the closest line, idempotent apply, byte-exact revert, dry-run writes nothing.

The trees are small fixtures written for these tests (tests/fixtures/recipes/) with the statement
shapes the recipes anchor on; a real upstream checkout is used only when its path is given in an
environment variable (see ``test_check_on_real_checkout``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RECIPE_FIX as FIX, deepgemm_tree

from xstage_trace.base.errors import InputError
from xstage_trace.instrument.recipes import RECIPES, get
from xstage_trace.instrument.recipes import engine
from xstage_trace.instrument.recipes.engine import Drift, Found
from xstage_trace.instrument.recipes.model import Anchor, Recipe, Upstream, shape


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xstage_trace", *args], capture_output=True, text=True)


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def located(recipe: Recipe, root: Path) -> list[Found]:
    """The recipe's anchors found in ``root``; none may drift (the drifts' descriptions fail the test)."""
    results = engine.locate(recipe, root)
    assert [r.describe() for r in results if isinstance(r, Drift)] == []
    return results


def test_shape_tolerates_whitespace_between_tokens():
    import re

    rx = re.compile(shape("cute::tma_store_wait<0>();"))
    assert rx.fullmatch("cute :: tma_store_wait< 0 >( );")
    assert not rx.fullmatch("cute::tma_store_wait<1>();")


def test_check_finds_every_deepgemm_anchor_at_the_fixture_lines(dg_tree: Path):
    results = engine.locate(get("deepgemm-sm90"), dg_tree)
    assert not [r for r in results if isinstance(r, Drift)]
    assert len(results) == len(get("deepgemm-sm90").anchors)
    by_name = {r.anchor.name: r for r in results}
    # kernel.cuh.in, counted by hand: line 31 holds the store wait's `if`, line 27 the math reg alloc
    assert (by_name["bf16.store_wait_begin"].path, by_name["bf16.store_wait_begin"].line) == (
        "deep_gemm/include/deep_gemm/impls/sm90_bf16_gemm.cuh", 31)
    assert by_name["fp8_1d2d.math_open"].line == 27
    assert by_name["fp8_1d2d.store_wait_begin"].statement.endswith("cute::tma_store_wait<0>();")


def test_check_cli_lists_file_line_and_statement(dg_tree: Path):
    r = cli("instrument", "check", "--target", "deepgemm-sm90", "--src", str(dg_tree))
    assert r.returncode == 0, r.stderr
    assert "fp8_1d1d.producer_open: deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d1d.cuh:21:" in r.stdout
    assert f"{len(get('deepgemm-sm90').anchors)} anchors found" in r.stdout


def test_drift_names_the_anchor_and_the_closest_line(dg_tree: Path):
    k = dg_tree / "deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d1d.cuh"
    k.write_text(k.read_text().replace("cute::tma_store_wait<0>();", "cute::tma_store_wait<1>();"))
    drift = [r for r in engine.locate(get("deepgemm-sm90"), dg_tree) if isinstance(r, Drift)]
    assert sorted(d.anchor.name for d in drift) == ["fp8_1d1d.store_wait_begin", "fp8_1d1d.store_wait_end"]
    # the drifted wait is line 32 of the fixture (its `if` line 31): difflib must point there
    closest = {d.anchor.name: d.closest for d in drift}
    assert closest["fp8_1d1d.store_wait_begin"].startswith("deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d1d.cuh:31: ")
    assert closest["fp8_1d1d.store_wait_end"].startswith("deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d1d.cuh:32: ")
    assert all("tma_store_wait<1>" in c for c in closest.values())
    r = cli("instrument", "check", "--target", "deepgemm-sm90", "--src", str(dg_tree))
    assert r.returncode == 2
    assert "anchor fp8_1d1d.store_wait_begin" in r.stderr and "closest:" in r.stderr
    assert "Traceback" not in r.stderr


def test_apply_refuses_a_drifted_tree_and_writes_nothing(dg_tree: Path):
    k = dg_tree / "deep_gemm/include/deep_gemm/impls/sm90_bf16_gemm.cuh"
    k.write_text(k.read_text().replace("__syncwarp();", "__syncthreads();"))
    before = snapshot(dg_tree)
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", str(dg_tree))
    assert r.returncode == 2 and "bf16.epilogue_end" in r.stderr
    assert snapshot(dg_tree) == before


def test_not_a_deepgemm_tree_is_one_line_error(tmp_path: Path):
    r = cli("instrument", "check", "--target", "deepgemm-sm90", "--src", str(tmp_path))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "sm90_fp8_gemm_1d2d.cuh" in r.stderr


def test_dry_run_prints_the_diff_and_writes_nothing(dg_tree: Path):
    before = snapshot(dg_tree)
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", str(dg_tree), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert snapshot(dg_tree) == before
    assert "+++ b/deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh" in r.stdout
    assert "+            XSTAGE_DG_CLOCK(xstage_mainloop_end_);" in r.stdout
    assert "+++ b/deep_gemm/include/deep_gemm/xstage/probe.cuh" in r.stdout


def test_apply_is_idempotent_and_writes_its_diff(dg_tree: Path):
    p = engine.plan(get("deepgemm-sm90"), dg_tree)
    assert engine.apply(p) is True
    after = snapshot(dg_tree)
    assert engine.apply(engine.plan(get("deepgemm-sm90"), dg_tree)) is False
    assert snapshot(dg_tree) == after
    diff = (dg_tree / ".xstage-recipe" / "deepgemm-sm90.diff").read_text()
    assert diff == p.diff()
    # the patched tree still checks (anchors located in the clean text)
    assert all(isinstance(r, Found) for r in engine.locate(get("deepgemm-sm90"), dg_tree))
    # every probe sits inside the branch it belongs to: open before close, the mainloop-end stamp
    # before the store wait, the store-done stamp after it, the tile's records after its TMA store;
    # nothing at the math tile loop's top (a tile's mainloop begins at the previous tile's end)
    text = (dg_tree / "deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh").read_text()
    math_loop = text.index("while (scheduler.get_next_block(m_block_idx, n_block_idx)) {", text.index("XSTAGE_DG_MATH_OPEN"))
    assert "XSTAGE" not in text[math_loop:text.index("\n", text.index("\n", math_loop) + 1)]
    order = [text.index(s) for s in ("XSTAGE_PROBE_OPEN_ELECTED", "kEvSchedule", "XSTAGE_PROBE_CLOSE",
                                     "XSTAGE_DG_MATH_OPEN", "XSTAGE_DG_CLOCK(xstage_mainloop_end_)", "cute::tma_store_wait<0>",
                                     "XSTAGE_DG_CLOCK(xstage_store_done_)", "cute::tma_store_arrive",
                                     "XSTAGE_DG_TILE_END(scheduler.current_iter",
                                     "XSTAGE_DG_MATH_CLOSE(scheduler.current_iter)")]
    assert order == sorted(order)
    assert "const __grid_constant__ cute::TmaDescriptor tensor_map_d/*>>>xstage" in text


def test_revert_restores_the_tree_byte_for_byte(dg_tree: Path):
    before = snapshot(dg_tree)
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", str(dg_tree))
    assert r.returncode == 0, r.stderr
    assert snapshot(dg_tree) != before
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", str(dg_tree), "--revert")
    assert r.returncode == 0, r.stderr
    assert snapshot(dg_tree) == before
    assert not (dg_tree / ".xstage-recipe").exists() and not (dg_tree / "csrc" / "xstage").exists()


def test_switching_the_probes_off_changes_only_the_switch_header(dg_tree: Path):
    before = snapshot(dg_tree)
    engine.apply(engine.plan(get("deepgemm-sm90"), dg_tree, trace=True))
    on = snapshot(dg_tree)
    engine.apply(engine.plan(get("deepgemm-sm90"), dg_tree, trace=False))
    off = snapshot(dg_tree)
    changed = sorted(k for k in on if on[k] != off.get(k))
    assert changed == [".xstage-recipe/deepgemm-sm90.diff", ".xstage-recipe/deepgemm-sm90.json",
                       "deep_gemm/include/deep_gemm/xstage/config.cuh"]
    assert b"#define XSTAGE_TRACE 1" in on["deep_gemm/include/deep_gemm/xstage/config.cuh"]
    assert b"#define XSTAGE_TRACE" not in off["deep_gemm/include/deep_gemm/xstage/config.cuh"]
    engine.revert(get("deepgemm-sm90"), dg_tree)
    assert snapshot(dg_tree) == before


def _toy(anchors: tuple[Anchor, ...]) -> Recipe:
    return Recipe(name="toy", title="toy", architectures=("sm_90a",),
                  upstream=(Upstream("example/toy", "0" * 40, "2026-01-01", "toy"),), sentinel=("a.cu",),
                  roles=("r",), events=(), anchors=anchors)


def test_replace_without_group_and_python_comments(tmp_path: Path):
    (tmp_path / "a.cu").write_bytes(b"int f(int x) { return x; }\r\nint g();\n")
    (tmp_path / "k.py").write_text("def mma(self):\n    self.issue()\n")
    r = _toy((Anchor("ret", "a.cu", r"return x;", "replace", "return x + 1;", "return x;"),
              Anchor("py", "k.py", r"^[ \t]*self\.issue\(\)\n", "before", "t0 = read_clock()", "self.issue()")))
    before = snapshot(tmp_path)
    engine.apply(engine.plan(r, tmp_path))
    assert (tmp_path / "a.cu").read_bytes().startswith(
        b"int f(int x) { /*>>>xstage toy:ret*/return x + 1;/*<<<xstage toy:ret*/ }\r\n")
    assert (tmp_path / "k.py").read_text() == (
        "def mma(self):\n    # >>> xstage-recipe toy:py\n    t0 = read_clock()\n    # <<< xstage-recipe toy:py\n"
        "    self.issue()\n")
    engine.revert(r, tmp_path)
    assert snapshot(tmp_path) == before


def test_count_mismatch_and_missing_file_are_named(tmp_path: Path):
    (tmp_path / "a.cu").write_text("x();\nx();\n")
    r = _toy((Anchor("twice", "a.cu", r"^x\(\);\n", "after", "y();", "x();"),
              Anchor("gone", "src/kernel_fwd.cu", r"z", "after", "y();", "z")))
    drift = {d.anchor.name: d for d in engine.locate(r, tmp_path)}
    assert drift["twice"].problem == "a.cu: 2 matches where 1 expected (a.cu:1, a.cu:2)"
    assert drift["gone"].problem == "no file matches src/kernel_fwd.cu" and drift["gone"].closest == "a.cu"


def test_revert_of_an_unapplied_tree_is_one_line_error(dg_tree: Path):
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", str(dg_tree), "--revert")
    assert r.returncode == 2 and "not applied" in r.stderr and r.stderr.count("\n") == 1


def test_list_names_every_target_with_its_events():
    r = cli("instrument", "list")
    assert r.returncode == 0, r.stderr
    for rec in RECIPES.values():
        assert rec.name in r.stdout
        for e in rec.events:
            assert f"event {e.id} {e.name}" in r.stdout


def test_unknown_target_is_one_line_error():
    r = cli("instrument", "flags", "--target", "nope")
    assert r.returncode == 2 and "unknown target 'nope'" in r.stderr


# Real upstream trees: XSTAGE_SRC_<TARGET> (dashes as underscores, upper case), e.g.
# XSTAGE_SRC_DEEPGEMM_SM90=/tmp/DeepGEMM at 54e2261. Checked, then applied and reverted on a copy.
@pytest.mark.parametrize("target", sorted(RECIPES))
def test_check_on_real_checkout(target: str, tmp_path: Path):
    var = "XSTAGE_SRC_" + target.upper().replace("-", "_")
    src = os.environ.get(var)
    if not src:
        pytest.skip(f"set {var} to an upstream checkout")
    recipe = get(target)
    results = located(recipe, Path(src))
    copy = tmp_path / "tree"
    for rel in {r.path for r in results} | set(recipe.sentinel):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(src) / rel, copy / rel)
    before = snapshot(copy)
    engine.apply(engine.plan(recipe, copy))
    engine.revert(recipe, copy)
    assert snapshot(copy) == before


def test_flags_follow_the_trace_switch():
    from xstage_trace.instrument.recipes.flags import environment

    assert environment(get("fa3"), trace=True)["NVCC_APPEND_FLAGS"] == "-DXSTAGE_TRACE=1"
    assert "NVCC_APPEND_FLAGS" not in environment(get("fa3"), trace=False)
    assert environment(get("fa4"), trace=False)["XSTAGE_TRACE"] == "0"
    r = cli("instrument", "flags", "--target", "flux")
    assert r.returncode == 0 and "export CUDAFLAGS=-DXSTAGE_TRACE=1\n" in r.stdout


def test_fa4_python_recipe_on_fixture_applies_inside_mma_only_and_reverts(tmp_path: Path):
    root = tmp_path / "fa"
    shutil.copytree(FIX / "fa4", root)
    before = snapshot(root)
    engine.apply(engine.plan(get("fa4"), root))
    text = (root / "flash_attn/cute/flash_fwd_sm90.py").read_text()
    # the second tile_idx (in first_half_block_overlap) is outside the mma context
    assert text.count("xstage_probe.tile_begin(") == 1 and text.count("xstage_probe.tile_end(") == 1
    assert ("            # >>> xstage-recipe fa4:tile_begin\n"
            "            xstage_probe.tile_begin(aux_tensors, tidx, m_block, head_idx, batch_idx)\n") in text
    compile(text, "flash_fwd_sm90.py", "exec")  # still valid Python
    assert (root / "flash_attn/cute/xstage_probe.py").is_file()
    engine.revert(get("fa4"), root)
    assert snapshot(root) == before


def test_fa3_recipe_on_fixture_threads_the_buffer_through_params(tmp_path: Path):
    root = tmp_path / "fa"
    shutil.copytree(FIX / "fa3", root)
    before = snapshot(root)
    results = located(get("fa3"), root)
    engine.apply(engine.plan(get("fa3"), root))
    epi = (root / "hopper/epilogue_fwd.hpp").read_text()
    assert epi.count("::xstage::DeviceBuffer xstage_buf{};") == 2  # Arguments and Params
    assert "args.seqused/*>>>xstage fa3:epilogue.params*/, args.xstage_buf/*<<<xstage fa3:epilogue.params*/};" in epi
    launch = (root / "hopper/flash_fwd_launch_template.h").read_text()
    assert "params.seqused_q/*>>>xstage fa3:launch.arg*/, flash::xstage_fa3::current()" in launch
    for api in ("flash_api.cpp", "flash_api_stable.cpp"):
        assert '#include "xstage_fa3_api.h"' in (root / "hopper" / api).read_text()
    kernel = (root / "hopper/flash_fwd_kernel_sm90.h").read_text()
    # the probe opens in the consumer branch, after the producer's register dealloc (it declares the writer flag there)
    assert kernel.index("warpgroup_reg_dealloc") < kernel.index("XSTAGE_FA3_OPEN(params.epilogue.xstage_buf, MmaThreadOffset, shared_storage.pipelines.xstage_writer_state)")
    # the writer state's field closes the shared pipeline storage
    assert kernel.index("smem_scheduler;") < kernel.index("XSTAGE_FA3_SMEM_FIELD") < kernel.index("} pipelines;")
    # three sites per tile, in loop order: mainloop begin before mma; the clock stamp of the mainloop's end and the
    # epilogue's begin after the scheduler's get_next_work; the epilogue's end (writing the stamp's two records and
    # its own) after store_zero's branch
    sites = [kernel.index(s) for s in ("XSTAGE_FA3_BEGIN(shared_storage.pipelines.xstage_writer_state,", "mainloop.mma(", "get_next_work</*IsProducerWarp=*/false>",
                                       "XSTAGE_FA3_SPAN_STAMP(shared_storage.pipelines.xstage_writer_state)", "if (tile_valid) {", "epilogue.store_zero(",
                                       "XSTAGE_FA3_END_STAMPED(shared_storage.pipelines.xstage_writer_state,", "epilogue.store_tail();", "XSTAGE_FA3_CLOSE(")]
    assert sites == sorted(sites)
    assert kernel.count("XSTAGE_FA3_BEGIN(") == kernel.count("XSTAGE_FA3_SPAN_STAMP(") == kernel.count("XSTAGE_FA3_END_STAMPED(") == 1
    # the writer flag lent to the mainloop object after the open, before the tile loop
    assert kernel.index("XSTAGE_FA3_OPEN(") < kernel.index("XSTAGE_FA3_LEND_FLAG(mainloop);") < kernel.index("for (auto work_tile_info")
    # K/V steps (the intra-warpgroup-overlap path only): the flag field opens the mainloop struct; one mark per block in
    # its fwd_step after the V wait, before the PV GEMM; the loop's exit after the loops, before the producers' signal
    ml = (root / "hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp").read_text()
    assert ml.index("struct CollectiveMainloopFwdSm90 {") < ml.index("XSTAGE_FA3_MAINLOOP_FIELD") < ml.index("static constexpr bool UseSchedulerBarrier")
    assert '#include "xstage_fa3.h"' in ml
    mark = ml.index("XSTAGE_FA3_KV_MARK(shared_storage.pipelines.xstage_writer_state, n_block);")
    assert ml.index("consumer_wait(pipeline_v, smem_pipe_read_v)") < mark < ml.index("toy_gemm_pv(n_block);")
    exit_site = ml.index("XSTAGE_FA3_KV_EXIT(shared_storage.pipelines.xstage_writer_state);")
    assert ml.index("fwd_step(n_block, toy_mask, toy_check);") < exit_site < ml.index("toy_last_pv();") < ml.index("No intra-WG overlap")
    assert ml.count("XSTAGE_FA3_KV_MARK(") == ml.count("XSTAGE_FA3_KV_EXIT(") == 1
    engine.revert(get("fa3"), root)
    assert snapshot(root) == before


def test_deepgemm_recipes_refuse_to_share_a_tree(dg_tree: Path):
    engine.apply(engine.plan(get("deepgemm-sm90"), dg_tree))
    with pytest.raises(InputError, match="revert it first"):
        engine.plan(get("deepgemm-megamoe"), dg_tree)


def test_revert_warns_about_edits_outside_the_recipe_and_keeps_them(dg_tree: Path):
    engine.apply(engine.plan(get("deepgemm-sm90"), dg_tree))
    k = dg_tree / "csrc/python_api.cpp"
    k.write_text(k.read_text() + "// user edit\n")
    rep = engine.revert(get("deepgemm-sm90"), dg_tree)
    assert rep.warnings == ["csrc/python_api.cpp: changed outside the recipe's code since apply; its other edits are kept"]
    assert k.read_text() == (FIX / "deepgemm_sm90" / "python_api.cpp").read_text() + "// user edit\n"


def test_flux_recipe_on_fixture_patches_only_the_scatter_visitor(tmp_path: Path):
    root = tmp_path / "flux"
    shutil.copytree(FIX / "flux", root)
    before = snapshot(root)
    results = located(get("flux"), root)
    by_name = {}
    for r in results:
        by_name.setdefault(r.anchor.name, []).append(r.line)
    # fixture lines counted by hand: VisitorAuxStoreScatter's Params `int n_split;` is line 19, not
    # VisitorOther's (line 8); the four waits are lines 21, 26, 29, 32
    assert by_name["evt.params_field"] == [19]
    assert by_name["grs.wait_begin"] == [21, 26, 29, 32]
    engine.apply(engine.plan(get("flux"), root))
    evt = (root / "src/gemm_rs/epilogue_evt.hpp").read_text()
    assert evt.count("::xstage::DeviceBuffer xstage_buf;") == 1
    engine.revert(get("flux"), root)
    assert snapshot(root) == before


@pytest.fixture
def mm_tree(tmp_path: Path) -> Path:
    """A DeepGEMM-shaped tree for the sm_100 Mega MoE recipe: its fixture kernel, the sm_90 launcher shape."""
    return deepgemm_tree(tmp_path / "deepgemm", "deepgemm_megamoe", ("sm100_fp8_fp4_mega_moe", "sm100_bf16_mega_moe"))


def test_megamoe_recipe_on_fixture_brackets_mma_epilogue_and_nvlink_barrier(mm_tree: Path):
    root = mm_tree
    before = snapshot(root)
    results = located(get("deepgemm-megamoe"), root)
    by_name = {r.anchor.name: r.line for r in results if r.path.endswith("sm100_bf16_mega_moe.cuh")}
    # kernel.cuh.in, counted by hand: the MMA warp's first tcgen05 fence is line 25 (not the k-loop's,
    # line 27), the epilogue lambda closes on line 47, the barrier call starts on line 53
    assert (by_name["bf16.mainloop_begin"], by_name["bf16.epilogue_end"], by_name["bf16.nvlink_end"]) == (25, 47, 53)
    engine.apply(engine.plan(get("deepgemm-megamoe"), root))
    text = (root / "deep_gemm/include/deep_gemm/impls/sm100_bf16_mega_moe.cuh").read_text()
    order = [text.index(s) for s in ("XSTAGE_PROBE_OPEN(xstage_buf", "XSTAGE_BEGIN(::xstage::megamoe::kEvMainloop",
                                     "XSTAGE_END_P(::xstage::megamoe::kEvMainloop", "XSTAGE_PROBE_OPEN_IF(xstage_buf",
                                     "XSTAGE_BEGIN(::xstage::megamoe::kEvTmemFullWait", "XSTAGE_END_P(::xstage::megamoe::kEvEpilogue",
                                     "Allocator().free", "XSTAGE_BEGIN(::xstage::megamoe::kEvNvlinkBarrier",
                                     "XSTAGE_END(::xstage::megamoe::kEvNvlinkBarrier", "toy_combine")]
    assert order == sorted(order)
    engine.revert(get("deepgemm-megamoe"), root)
    assert snapshot(root) == before


REPO = Path(__file__).resolve().parents[1]
PROBE_HEADER = "src/xstage_trace/instrument/include/xstage/probe.cuh"


@pytest.mark.parametrize("target, tree", [("deepgemm-sm90", "dg_tree"), ("deepgemm-megamoe", "mm_tree")])
def test_inserted_probe_header_is_the_one_at_head(target: str, tree: str, request):
    """The probe.cuh copy a recipe puts into deep_gemm/include is byte for byte the project's header,
    in the working tree and (in a git checkout, as CI's clean clone) at HEAD."""
    root = request.getfixturevalue(tree)
    recipe = get(target)
    copies = [f.dest for f in recipe.added if f.source == engine.PROBE_SOURCE]
    assert len(copies) == 1
    assert cli("instrument", "apply", "--target", target, "--src", str(root)).returncode == 0
    inserted = (root / copies[0]).read_bytes()
    assert inserted == (REPO / PROBE_HEADER).read_bytes()
    head = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{PROBE_HEADER}"], capture_output=True)
    if head.returncode == 0:  # a checkout with history (not an installed copy of the tests)
        assert inserted == head.stdout, f"{PROBE_HEADER} differs from HEAD: commit it before staging a recipe run"


def test_python_replace_rewrites_the_lines_it_touches_as_a_fenced_block(tmp_path: Path):
    (tmp_path / "a.cu").write_text("int x;\n")
    (tmp_path / "k.py").write_text("def f(x, _builder=None):\n    return g(x,\n             _builder=_builder)\n")
    r = _toy((Anchor("param", "k.py", r"\b_builder=None\b", "replace", "_semantic=None", "_builder=None"),
              Anchor("arg", "k.py", r"\b_builder=_builder\b", "replace", "_semantic=_semantic", "_builder=_builder")))
    before = snapshot(tmp_path)
    engine.apply(engine.plan(r, tmp_path))
    assert (tmp_path / "k.py").read_text() == (
        "# >>> xstage-recipe toy:param\ndef f(x, _semantic=None):\n# <<< xstage-recipe toy:param\n"
        "    return g(x,\n"
        "             # >>> xstage-recipe toy:arg\n             _semantic=_semantic)\n             # <<< xstage-recipe toy:arg\n")
    assert engine.plan(r, tmp_path).is_applied()  # the clean text comes back from the manifest
    engine.revert(r, tmp_path)
    assert snapshot(tmp_path) == before


def test_flux_triton_recipe_on_fixture_patches_the_two_kernels_only(tmp_path: Path):
    import ast
    import re

    root = tmp_path / "flux"
    shutil.copytree(FIX / "flux_triton", root)
    before = snapshot(root)
    recipe = get("flux-triton")
    assert cli("instrument", "apply", "--target", "flux-triton", "--src", str(root)).returncode == 0
    pkg = root / "python/flux_triton"
    texts = {p: (pkg / p).read_text() for p in ("extra/__init__.py", "extra/_v3.py", "kernels/gemm_rs.py")}
    for text in texts.values():
        ast.parse(text)  # still Python
    assert "_builder" not in texts["extra/_v3.py"].replace("xstage-recipe", "")
    assert texts["extra/__init__.py"].index("from ._v3 import *") < texts["extra/__init__.py"].index("try:")
    k = texts["kernels/gemm_rs.py"]
    decoy, gemm, reduce = k.index("def decoy_kernel("), k.index("def gemm_rs_nvlink_kernel("), k.index("def reduce_nvlink_kernel(")
    assert "xp." not in k[decoy:gemm] and "trace_meta" not in k[decoy:gemm]
    calls = lambda part: re.findall(r"xp\.(\w+)\(xs(?:, (XS_\w+))?|xp\.(probe_open)\(", part)  # noqa: E731
    flat = lambda part: [c[2] or (c[0] + (":" + c[1] if c[1] else "")) for c in calls(part)]  # noqa: E731
    assert flat(k[gemm:reduce]) == ["probe_open", "mark:XS_TILE_INFO", "begin:XS_MAINLOOP", "end:XS_MAINLOOP", "begin:XS_RS",
                                    "begin:XS_SIGNAL", "end:XS_SIGNAL", "end:XS_RS", "probe_close"]
    assert flat(k[reduce:]) == ["probe_open", "begin:XS_REDUCE", "begin:XS_FLAG_WAIT", "end:XS_FLAG_WAIT", "end:XS_REDUCE",
                                "probe_close"]
    for part in (k[gemm:reduce], k[reduce:]):
        params = part[: part.index("):")]
        assert "trace_meta,\n" in params and "TRACE_CAP: tl.constexpr,\n" in params and "XSTAGE: tl.constexpr,\n" in params
    # the ids the kernels use are the ids the recipe lists for each kernel's events
    ids = {m.group(1).lower(): int(m.group(2)) for m in re.finditer(r"^XS_(\w+) = tl\.constexpr\((\d+)\)$", k, re.M)}
    listed = {e.name: e.id for e in recipe.events}
    assert ids == listed and len(ids) == len(recipe.events)
    engine.revert(recipe, root)
    assert snapshot(root) == before
