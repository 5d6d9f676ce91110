"""What the CLI commands do, as plain functions (the CLI only parses and prints)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from xstage_trace.base.atomic import write_text_atomic
from xstage_trace.base.errors import InputError
from xstage_trace.base.table_files import read_table_file
from xstage_trace.base.jsonable import json_default


def _default_run_dir(first: Path) -> Path:
    stem = first.name.split(".")[0] or "run"
    return Path.cwd() / f"{stem}.xstage-run"


def run_analyses(tables: dict[str, pa.Table], model) -> tuple[dict[str, pa.Table], dict]:
    """Analyses that exist so far, over collected tables: calibration points, bursts + §4 audit, tiles."""
    from xstage_trace.analysis.bursts import audit_bursts, reconstruct_bursts, remote_store_spans
    from xstage_trace.analysis.calibration_points import calibration_points
    from xstage_trace.analysis.stall import attach_kernel_times, table3_from_tiles
    from xstage_trace.analysis.tiles import tile_table

    extra: dict = {}
    probes = tables["probes"].to_pandas() if tables["probes"].num_rows else pd.DataFrame()
    if probes.empty:
        return tables, extra
    slices = tables["probe_slices"].to_pandas()
    pts = calibration_points(probes, slices)
    if len(pts):
        extra["calibration_points"] = pts
    bursts = audit_bursts(reconstruct_bursts(remote_store_spans(probes)), model)
    tables["bursts"] = pa.Table.from_pandas(bursts, preserve_index=False)
    tiles = tile_table(probes, slices)
    if len(tiles):
        tables["tiles"] = pa.Table.from_pandas(tiles, preserve_index=False)
        extra["table3"] = attach_kernel_times(table3_from_tiles(tiles), tables["kernels"].to_pandas())
    return tables, extra


def analyze_inputs(inputs: list[Path], output: Path | None, nsys=None, calibration=None, allow_overflow=False, progress=None, nvtx: str | None = None) -> dict:
    """collect → align → analyses → run dataset (atomic) → summary dict (the --json object)."""
    from xstage_trace.calibration_io import load_platform
    from xstage_trace.collectors.collect import collect
    from xstage_trace.collectors.dataset import write_run
    from xstage_trace.collectors.nvtx_filter import restrict_to_nvtx

    model = load_platform(calibration) if calibration else None
    c = collect(inputs, nsys=nsys, allow_overflow=allow_overflow, progress=progress)
    c = restrict_to_nvtx(c, nvtx) if nvtx else c
    tables, extra = run_analyses(c.tables, model)
    run_dir = Path(output) if output else _default_run_dir(Path(inputs[0]))
    manifest = dict(c.manifest, calibration=str(calibration) if calibration else None, warnings=c.warnings)
    if "calibration_points" in extra:
        manifest["calibration_points"] = int(len(extra["calibration_points"]))
    # calibration_points.csv beside the tables, so that `calibrate fit RUN_DIR` works
    extra_files = {"calibration_points.csv": extra["calibration_points"].to_csv(index=False)} if "calibration_points" in extra else None
    write_run(run_dir, tables, manifest, extra_files)
    gm = tables["gpu_metrics"]
    metric_counts = {}
    if gm.num_rows:
        vc = pc.value_counts(gm["metric"].cast(pa.string()))
        metric_counts = {d["values"]: int(d["counts"]) for d in vc.to_pylist()}
    tiles = tables["tiles"]
    backpressured = int(pc.sum(tiles["backpressured"].cast(pa.int64())).as_py() or 0) if tiles.num_rows else 0
    return {
        "run_dir": str(run_dir),
        "gpus": c.manifest["gpus"],
        "kernels": tables["kernels"].num_rows,
        "nvtx_ranges": tables["nvtx"].num_rows,
        "gpu_metrics": metric_counts,
        "probes": tables["probes"].num_rows,
        "bursts": tables["bursts"].num_rows,
        "backpressured_tiles": backpressured,
        "tiles": tiles.num_rows,
        "calibration_points": manifest.get("calibration_points", 0),
        "table3": extra["table3"].round(3).to_dict("records") if "table3" in extra else [],
        "alignment": c.manifest["alignment"],
        "time_base": c.manifest["time_base"],
        "warnings": c.warnings,
    }


def load_measurements(path: Path) -> pd.DataFrame:
    """Calibration points from a CSV, a Parquet file, a run folder, or a folder of calibration dumps."""
    from xstage_trace.analysis.calibration_points import calibration_points
    from xstage_trace.collectors.collect import collect

    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or folder", "check the path")
    if path.is_dir() and (path / "calibration_points.csv").is_file():
        return pd.read_csv(path / "calibration_points.csv")
    if path.is_dir():
        c = collect([path])
        pts = calibration_points(c.tables["probes"].to_pandas(), c.tables["probe_slices"].to_pandas())
    else:
        pts = read_table_file(path, "the calibration points CSV/Parquet or a folder of calibration dumps")
    need = {"dest", "mode", "K", "B", "V", "gap_ns", "tiss_med_ns", "tiss_p90_ns", "period_med_ns"}
    missing = need - set(pts.columns)
    if missing:
        raise InputError(path, f"calibration points lack columns {sorted(missing)}", "use the columns of h200_burst_gap_sweep.csv or pass calibration dumps")
    if pts.empty:
        raise InputError(path, "no calibration points", "run the calibration benchmark (xstage-trace calibrate run)")
    return pts


def fit_measurements(path: Path, dest: str | None, output: Path | None, platform: str = "") -> dict:
    """calibrate fit: load points, fit one store path, write and return the calibration document."""
    from xstage_trace.analysis.calibration_fit import fit_calibration
    from xstage_trace.calibration_io import calibration_document
    from xstage_trace.base.hashing import sha256_of

    pts = load_measurements(path)
    dests = sorted(pts["dest"].astype(str).unique())
    if dest is None and len(dests) > 1:
        raise InputError(path, f"points hold several store paths ({', '.join(dests)})", "choose one with --dest")
    dest = dest or dests[0]
    if dest not in dests:
        raise InputError(path, f"no points for --dest {dest} (have {', '.join(dests)})", "pick one of those")
    fit = fit_calibration(pts, platform=platform, store_path=dest)
    digest = sha256_of(path) if Path(path).is_file() else None
    doc = calibration_document(fit, digest, Path(path).name)
    if output:
        write_text_atomic(Path(output), json.dumps(doc, indent=2, default=json_default))
    return doc


def run_calibration(dest: str, output: Path, quick: bool, binary: Path | None, nvcc: str, device: int = 0,
                    peer: int | None = None) -> dict:
    """calibrate run: build (or take) the benchmark, run the sweep, collect, fit, write JSON and report."""
    from xstage_trace.instrument import bench_source, include_dir

    output = Path(output)
    dumps = output / "dumps"
    if binary is None:
        exe = shutil.which(nvcc)
        if exe is None:
            raise InputError(None, f"{nvcc} not found", "install the CUDA toolkit or pass --binary with a built burst_gap")
        binary = Path(tempfile.mkdtemp()) / "burst_gap"
        cmd = [exe, "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", f"-I{include_dir()}", "-DXSTAGE_TRACE", str(bench_source()), "-o", str(binary)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise InputError(bench_source(), f"nvcc failed: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}", "check the CUDA toolkit (sm_90a needs CUDA 12+)")
    dumps.mkdir(parents=True, exist_ok=True)
    args = [str(binary), "--dest", dest, "--out", str(dumps), "--device", str(device)]
    args += (["--peer", str(peer)] if peer is not None else []) + (["--quick"] if quick else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise InputError(binary, f"benchmark failed (exit {r.returncode}): {(r.stderr or r.stdout).strip().splitlines()[-1:]}", "check that a GPU is visible (nvidia-smi) and the destination exists")
    summary = analyze_inputs([dumps], output / "run")
    points = pd.read_csv(output / "run" / "calibration_points.csv")
    store_path = str(points["dest"].iloc[0])  # for peer runs this carries the direction (peer0to1)
    doc = fit_measurements(output / "run", store_path, output / f"calibration_{store_path}.json", platform=(summary["gpus"] or [""])[0])
    write_report(output, doc, points)
    return doc


def write_report(folder: Path, doc: dict, points: pd.DataFrame) -> None:
    """report.md and its figures/ (SVG and PNG) for one fitted store path."""
    from xstage_trace.reports.calibration import calibration_figures, calibration_report
    from xstage_trace.reports.figures import save_figure

    figs = calibration_figures(doc, points)
    for stem, fig in figs.items():
        save_figure(fig, Path(folder) / "figures", stem)
    text = calibration_report(doc, points)
    text += "\n## Figures\n\n" + "\n".join(f"![{n}](figures/{n}.svg)" for n in sorted(figs)) + "\n"
    write_text_atomic(Path(folder) / f"report_{doc['store_path']}.md", text)
