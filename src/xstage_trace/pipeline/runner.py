"""What the CLI commands do, as plain functions (the CLI only parses and prints)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from xstage_trace.base.errors import InputError
from xstage_trace.base.table_files import check_numbers, read_table_file
from xstage_trace.base.jsonable import dumps, json_ready


def _default_run_dir(first: Path) -> Path:
    stem = first.name.split(".")[0] or "run"
    return Path.cwd() / f"{stem}.xstage-run"


def analyze_inputs(inputs: list[Path], output: Path | None, nsys=None, calibration=None, allow_overflow=False, progress=None,
                   rank_overrides: dict[str, int] | None = None, warmup_launches: int = 0, workers: int | None = None,
                   force: bool = False, scheduler: str | None = None, nvtx: str | None = None, nvtx_domain: str | None = None) -> dict:
    """plan (exports, dump headers, pairing; each dump's slice table written as it is read) → dumps streamed
    through the per-dump analyses (probes, tiles and bursts written part by part as they are produced;
    pipeline/stream.py) → Table 3 per configuration → run dataset (atomic) → summary dict. All of it runs inside
    the run's temporary folder, so bad input leaves no output behind.

    The output folder is checked before any input is read: it must be new, or an earlier run folder
    with ``force``, and it must neither be, lie inside, nor hold an input."""
    from xstage_trace.pipeline.analyses import AnalysisContext
    from xstage_trace.base.malloc import keep_freed_memory
    from xstage_trace.analysis.calibration_model import link_model_of_document
    from xstage_trace.collectors.calibration_io import read_document
    from xstage_trace.dataset.calibration import load_platform
    from xstage_trace.collectors.collect import plan_run
    from xstage_trace.dataset.run_folder import check_output_against_inputs, check_output_dir, staged_run
    from xstage_trace.collectors.nvtx_filter import restrict_to_nvtx
    from xstage_trace.pipeline.analyses import DUMP_ANALYSES
    from xstage_trace.pipeline.stream import analyze_streaming, early_pool, run_results

    keep_freed_memory()  # this process reads every dump's header and, for a small run, analyzes it
    run_dir = Path(output) if output else _default_run_dir(Path(inputs[0]))
    check_output_against_inputs(run_dir, [*inputs, calibration] if calibration else inputs)  # first: --force cannot help here
    check_output_dir(run_dir, force)
    ctx = AnalysisContext(model=load_platform(calibration) if calibration else None,
                          link=link_model_of_document(read_document(calibration), calibration) if calibration else None,
                          warmup_launches=warmup_launches)
    kept: dict[str, pd.DataFrame] = {}
    with early_pool(inputs, workers, scheduler) as pool, staged_run(run_dir, force) as stage:  # workers start while the plan is made
        plan = plan_run(inputs, stage.folder, nsys=nsys, allow_overflow=allow_overflow, rank_overrides=rank_overrides)  # writes probe_slices
        plan = restrict_to_nvtx(plan, nvtx, nvtx_domain) if (nvtx, nvtx_domain) != (None, None) else plan
        tables = dict(plan.tables)
        tick = progress("analyzing probe dumps", len(plan.tasks)) if (progress and plan.tasks) else None
        steps = dict(tables, probe_slices=plan.slice_summary)  # one row per dump: what the steps read of its slices
        result = analyze_streaming(plan.tasks, stage.folder, steps, ctx, workers, tick, scheduler, pool)
        warnings = plan.warnings + result.warnings
        stage.add_counts({**result.counts, **({"probe_slices": plan.slice_rows} if plan.slice_parts else {})})  # none: commit writes it empty
        for name, table in tables.items():
            if name not in stage.counts:
                stage.write_table(name, table)
        results = run_results(stage.folder, {"dumps": tables["dumps"].to_pandas(), "kernels": tables["kernels"].to_pandas()}, ctx,
                              result.results)
        for a in DUMP_ANALYSES:  # the per-dump steps kept as results, each in its file
            frame = results.pop(a.name) if a.keep == "result" else pd.DataFrame()
            if len(frame):
                frame = frame.sort_values(list(a.order)).reset_index(drop=True) if a.order else frame
                stage.write_text(a.file, frame.to_csv(index=False))
                kept[a.name] = frame
        for name, frame in results.items():
            if len(frame):
                stage.write_result(name, frame)
        if calibration:
            stage.copy_calibration(calibration)
        points = kept.get("calibration_points", pd.DataFrame())
        written = stage.commit(dict(plan.manifest, calibration=str(calibration) if calibration else None, warnings=warnings,
                                    warmup_launches=warmup_launches, calibration_points=int(len(points)),
                                    calibration_file="calibration.json" if calibration else None))
    table3 = results.get("table3", pd.DataFrame())
    gm = tables["gpu_metrics"]
    metric_counts = {}
    if gm.num_rows:
        vc = pc.value_counts(gm["metric"].cast(pa.string()))
        metric_counts = {d["values"]: int(d["counts"]) for d in vc.to_pylist()}
    return {
        "run_dir": str(run_dir),
        "gpus": plan.manifest["gpus"],
        "kernels": tables["kernels"].num_rows,
        "nvtx_ranges": tables["nvtx"].num_rows,
        "gpu_metrics": metric_counts,
        "probes": written["probes"],
        "dumps": tables["dumps"].num_rows,
        "bursts": written["bursts"],
        "backpressured_tiles": result.backpressured,
        "tiles": written["tiles"],
        "calibration_points": int(len(points)),
        "table3": table3.round(3).astype(object).where(table3.notna(), None).to_dict("records"),  # NaN → null
        "verdicts": verdict_records(results.get("verdicts", pd.DataFrame())),
        "alignment": plan.manifest["alignment"],
        "time_base": plan.manifest["time_base"],
        "warnings": warnings,
    }


def verdict_records(verdicts: pd.DataFrame) -> list[dict]:
    """The verdict rows for JSON (``analyze --json``'s ``verdicts``): times in µs, rounded to 0.001 µs, the
    prediction null without a calibration; the schedule null where the kernel has none."""
    out = []
    for row in verdicts.to_dict("records"):
        rec = {k: (None if v == "-" else v) for k, v in row.items() if not k.endswith("_ns")}
        rec.update({f"{k[:-3]}_us": (None if pd.isna(v) else round(float(v) / 1e3, 3)) for k, v in row.items() if k.endswith("_ns")})
        rec["model_agrees"] = None if row["model_agrees"] is None or pd.isna(row["model_agrees"]) else bool(row["model_agrees"])
        out.append(rec)
    return out


POINT_COLUMNS = ("dest", "mode", "K", "B", "V", "gap_ns", "tiss_med_ns", "tiss_p90_ns", "period_med_ns")
POINT_OPTIONAL = ("store", "bursts")  # what the fit reads beyond POINT_COLUMNS; other columns are never parsed
POINT_TEXT = ("dest", "mode", "store")
POINT_MODES = ("periodic", "isolated")
MAX_POINTS_ENV = "XSTAGE_MAX_CALIBRATION_POINTS"
DEFAULT_MAX_FIT_POINTS = 1024  # points of one store path and instruction a fit takes (benchmarks/README.md: memory and time at the limit)
FILE_ROWS_PER_FIT_POINT = 1024  # a points file may hold this many times more rows (other paths, instructions), read column-wise


def max_fit_points() -> int:
    """The most calibration points one fit takes: $XSTAGE_MAX_CALIBRATION_POINTS, else DEFAULT_MAX_FIT_POINTS."""
    from xstage_trace.base.limits import positive_int_env

    return positive_int_env(MAX_POINTS_ENV, DEFAULT_MAX_FIT_POINTS, "integer", "a point count")


def _read_points(path: Path, what: str) -> pd.DataFrame:
    """A calibration points table, only the columns the fit reads, text as categories, its size checked first."""
    return read_table_file(path, what, columns=POINT_COLUMNS + POINT_OPTIONAL, categories=POINT_TEXT,
                           max_rows=max_fit_points() * FILE_ROWS_PER_FIT_POINT, limit_env=MAX_POINTS_ENV)


def check_fit_size(pts: pd.DataFrame, path: Path, dest: str, store: str) -> None:
    """InputError when the points of (``dest``, ``store``) are more than one fit takes (its Q grid and
    bootstrap grow with them: benchmarks/README.md), decided before the fit allocates anything."""
    from xstage_trace.analysis.calibration_fit import store_of

    n = int(((pts["dest"].astype(str) == dest) & (store_of(pts) == store)).sum())
    limit = max_fit_points()
    if n > limit:
        raise InputError(path, f"holds {n} calibration points of {dest}/{store}, more than the {limit} one fit takes",
                         f"fit one sweep at a time (a sweep has a few hundred launches), or set {MAX_POINTS_ENV}={n} if this machine has the memory")


def load_measurements(path: Path) -> pd.DataFrame:
    """Calibration points from a CSV, a Parquet file, a run folder, or a folder of calibration dumps,
    checked before use: K, B, V and the times positive and finite, gaps finite and ≥ 0, known modes."""
    from xstage_trace.analysis.calibration_points import calibration_points
    from xstage_trace.base.paths import input_kind
    from xstage_trace.collectors.collect import collect

    path = Path(path)
    source = path
    if input_kind(path) == "dir" and (path / "calibration_points.csv").is_file():
        source = path / "calibration_points.csv"
        pts = _read_points(source, "the calibration_points.csv written by analyze")
    elif path.is_dir():
        c = collect([path])
        pts = calibration_points(*(c.tables[n].to_pandas() for n in ("probes", "probe_slices", "dumps")))
    else:
        pts = _read_points(path, "the calibration points CSV/Parquet or a folder of calibration dumps")
    missing = set(POINT_COLUMNS) - set(pts.columns)
    if missing:
        raise InputError(source, f"calibration points lack columns {sorted(missing)}", "use the columns of h200_burst_gap_sweep.csv or pass calibration dumps")
    if pts.empty:
        raise InputError(source, "no calibration points", "run the calibration benchmark (xstage-trace calibrate run)")
    check_numbers(pts, source, positive=("K", "B", "V", "tiss_med_ns", "tiss_p90_ns", "period_med_ns"), non_negative=("gap_ns",),
                  fix="calibration points need positive K, B, V and times and a gap >= 0; re-run the benchmark or fix those rows")
    bad_mode = ~pts["mode"].isin(POINT_MODES)
    if bad_mode.any():
        raise InputError(source, f"column mode has {int(bad_mode.sum())} values other than periodic/isolated (first: {pts['mode'][bad_mode].iloc[0]!r})",
                         "use the modes of h200_burst_gap_sweep.csv")
    return pts


def _one_of(values, path: Path, chosen: str | None, option: str, what: str, among: str = "") -> str:
    """The value of ``option`` among the points' ``values`` (``chosen``, or the only one there is);
    InputError naming ``path`` when there are several and none is chosen, or the chosen one is absent."""
    have = sorted(set(values))
    if chosen is None and len(have) > 1:
        raise InputError(path, f"points{among} hold several {what} ({', '.join(have)})", f"choose one with {option}")
    chosen = chosen or have[0]
    if chosen not in have:
        raise InputError(path, f"no points{among} for {option} {chosen} (have {', '.join(have)})", "pick one of those")
    return chosen


def _store_path_of(pts: pd.DataFrame, path: Path, dest: str | None, option: str) -> str:
    return _one_of(pts["dest"].astype(str), path, dest, option, "store paths")


def _store_instruction_of(pts: pd.DataFrame, path: Path, dest: str, store: str | None, option: str) -> str:
    """The store instruction to fit among ``dest``'s points (points without a store column are stg)."""
    from xstage_trace.analysis.calibration_fit import store_of

    return _one_of(store_of(pts[pts["dest"].astype(str) == dest]), path, store, option, "store instructions", f" of {dest}")


def _is_calibration_json(path: Path) -> bool:
    from xstage_trace.collectors.calibration_io import read_document

    try:
        read_document(path)
    except InputError:
        return False
    return True


def check_calibration_output(output: Path, force: bool, inputs: tuple = ()) -> None:
    """``calibrate fit -o`` (base/output.check_output): never an input, never a user's file; only an
    earlier calibration JSON, with ``force``."""
    from xstage_trace.base.output import check_output

    check_output(output, inputs=inputs, force=force, ours=_is_calibration_json, example="calib.json")


def fit_measurements(path: Path, dest: str | None, output: Path | None, platform: str = "",
                     validate: Path | None = None, validate_dest: str | None = None, force: bool = False,
                     store: str | None = None, validate_store: str | None = None, path_drain: Path | None = None) -> dict:
    """calibrate fit: load points, fit one store path and store instruction (``store``: stg | bulk | tensor2d),
    optionally predict another run with no refit (``validate``, its store path ``validate_dest`` and
    instruction ``validate_store``, default the fitted ones), check, write and return the document (a
    fit whose R, T_iss^0 or Q is not positive and finite is refused, never written); ``path_drain``: the path-drain
    bench's folder, whose drain rate, capacity and load coupling the document adds (pipeline.path_drain)."""
    from xstage_trace.analysis.calibration_fit import UnrecoveredSweep, fit_calibration, validate as validate_fit
    from xstage_trace.analysis.calibration_model import calibration_document, validation_document
    from xstage_trace.collectors.calibration_io import check_document
    from xstage_trace.base.hashing import sha256_of

    if output:
        check_calibration_output(output, force, (path, validate))
    pts = load_measurements(path)
    dest = _store_path_of(pts, path, dest, "--dest")
    store = _store_instruction_of(pts, path, dest, store, "--store")
    other = None
    if validate is not None:
        other = load_measurements(validate)
        validate_dest = _store_path_of(other, validate, validate_dest or (dest if dest in set(other["dest"].astype(str)) else None), "--validate-dest")
        validate_store = _store_instruction_of(other, validate, validate_dest, validate_store or store, "--validate-store")
    check_fit_size(pts, path, dest, store)
    if other is not None:
        check_fit_size(other, validate, validate_dest, validate_store)
    try:
        fit = fit_calibration(pts, platform=platform, store_path=dest, store=store)
    except UnrecoveredSweep as exc:
        raise InputError(path, str(exc), "add isolated launches or periodic ones with large gaps to the sweep "
                         "(the calibration bench's default sweep has both)") from None
    vdoc = None
    if other is not None:
        v = validate_fit(fit, other, validate_dest, validate_store)
        vdoc = validation_document(v, sha256_of(validate) if Path(validate).is_file() else None, Path(validate).name, validate_dest, validate_store)
    digest = sha256_of(path) if Path(path).is_file() else None
    drain = coupling = None
    if path_drain is not None:
        from xstage_trace.pipeline.path_drain import path_drain_document

        drain, coupling = path_drain_document(path_drain, dest, pts)
    doc = calibration_document(fit, digest, Path(path).name, vdoc, drain, coupling)
    try:
        check_document(json_ready(doc), path)
    except InputError as exc:
        raise InputError(path, f"the fit is not a usable platform model ({exc.problem})",
                         "the points do not determine M_X: include zero-gap periodic launches and recovered (large-gap or isolated) ones") from None
    if output:
        from xstage_trace.base.output import write_output

        write_output(Path(output), dumps(doc, indent=2))
    return doc


def run_calibration(dest: str, output: Path, quick: bool, binary: Path | None, nvcc: str, device: int = 0,
                    peer: int | None = None, store: str = "stg") -> tuple[dict, pd.DataFrame]:
    """calibrate run: build (or take) the benchmark, run the sweep with the ``store`` instruction (stg | bulk | tensor2d),
    collect, fit and write the JSON; returns the document and the calibration points (the CLI writes the report
    with reports.calibration.write_calibration_report)."""
    from xstage_trace.base.config import STORES
    from xstage_trace.collectors.calibration_io import calibration_name
    from xstage_trace.instrument import bench_source, include_dir

    if store not in STORES:
        raise InputError(None, f"--store {store!r} is not one of {', '.join(STORES)}", "pass --store stg, bulk or tensor2d")
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
    args = [str(binary), "--dest", dest, "--store", store, "--out", str(dumps), "--device", str(device)]
    args += (["--peer", str(peer)] if peer is not None else []) + (["--quick"] if quick else [])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise InputError(binary, f"benchmark failed (exit {r.returncode}): {(r.stderr or r.stdout).strip().splitlines()[-1:]}", "check that a GPU is visible (nvidia-smi) and the destination exists")
    summary = analyze_inputs([dumps], output / "run", force=True)  # this command owns output/run
    points = pd.read_csv(output / "run" / "calibration_points.csv")
    store_path = str(points["dest"].iloc[0])  # for peer runs this carries the direction (peer0to1)
    name = calibration_name({"store_path": store_path, "store": store})
    doc = fit_measurements(output / "run", store_path, output / f"calibration_{name}.json", platform=(summary["gpus"] or [""])[0], force=True, store=store)
    return doc, points
