"""The xstage_tiles Nsight Systems recipe: its folder as NSYS_RECIPE_PATH finds it, and the mapper
and reducer it delegates to, on the sample capture. (The recipe framework ships inside Nsight
Systems; it is not installed here, so the class itself runs only under `nsys recipe`.)"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pandas as pd

from conftest import CALIB, FUSED
from xstage_trace.reports.recipe import map_report, reduce_results


def test_nsys_recipe_path_holds_the_recipe_folder():
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "nsys-recipe-path"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0
    from pathlib import Path

    folder = Path(r.stdout.strip()) / "xstage_tiles"
    meta = json.loads((folder / "metadata.json").read_text())
    assert {"module_name", "display_name", "description"} <= set(meta)
    module = folder / f"{meta['module_name']}.py"
    tree = ast.parse(module.read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert len(classes) == 1 and ast.unparse(classes[0].bases[0]) == "recipe.Recipe"
    methods = {f.name for f in classes[0].body if isinstance(f, ast.FunctionDef)}
    assert {"mapper_func", "reducer_func", "run", "get_argument_parser"} <= methods


def test_mapper_and_reducer_on_the_sample(tmp_path):
    traced = FUSED / "traced"
    v = map_report(next(traced.glob("*.nsys-rep")), tmp_path, calibration=CALIB / "calibration_host.json", nvtx="* shape=S1 *")
    # host S1 and its local-store control: only the host expert-wave schedule is stall-bound
    got = {(d, s): verdict for d, s, verdict in zip(v["dest"], v["schedule"], v["verdict"])}
    assert got == {("host", "wave"): "stall-bound", ("host", "interleaved"): "covered", ("local", "wave"): "covered", ("local", "interleaved"): "covered"}
    assert (tmp_path / "fused_reference.xstage-run.report" / "report.md").is_file()
    pq, md = reduce_results([v, v.assign(report="again")], tmp_path / "out" / "v.parquet", tmp_path / "out" / "s.md")
    back = pd.read_parquet(pq)
    assert len(back) == 2 * len(v) and back["report"].nunique() == 2
    assert "2 of 8 configuration × schedule pairs stall-bound over 2 report(s)" in md.read_text()


def test_mapper_passes_warmup_launches_to_analyze(tmp_path):
    from xstage_trace import open_run

    traced = FUSED / "traced"
    v = map_report(next(traced.glob("*.nsys-rep")), tmp_path, nvtx="* shape=S3 *", warmup_launches=2)
    assert open_run(v["run_dir"].iloc[0]).manifest["warmup_launches"] == 2


def test_mapper_without_dumps_is_bad_input(tmp_path):
    from xstage_trace.base.errors import InputError

    report = tmp_path / "x.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report")
    try:
        map_report(report, tmp_path)
    except InputError as exc:
        assert "no probe dumps" in exc.one_line()
    else:
        raise AssertionError("expected InputError")
