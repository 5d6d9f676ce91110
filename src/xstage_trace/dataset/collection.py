"""Many run folders as one dataset, on DuckDB (issue 15): Table 3 across runs, the worst backpressured
configurations, calibration drift over time, and SQL over every table of every run.

    import xstage_trace
    c = xstage_trace.open_collection(["ci-runs/"])      # run folders, or folders holding them
    c.table3()                # docs/model.md §5 Table 3 of every run, one row per (run, configuration)
    c.worst(10)               # (run, configuration) ranked by backpressured tiles
    c.calibration_drift()     # fitted M_X per store path over time, drift vs the first fit
    c.point_drift()           # calibration points of every run vs the same point in the earliest run
    c.sql("SELECT run, count(*) FROM tiles WHERE backpressured GROUP BY run")

Each run-dataset table (docs/run-dataset.md) is a DuckDB view named after it over every run's
Parquet files (``read_parquet([...], filename = true, union_by_name = true)``, so runs written by
other schema revisions line up by column name) with a ``run`` column (the run folder). ``runs`` holds
one row per run from its manifest.json, with ``captured_utc``: the first kernel's start (nsys), else
the first probe slice's ``%globaltimer`` (UTC ns on NVIDIA GPUs). ``table3`` reads each run's
``table3.parquet`` and falls back to ``open_run(dir).table3()`` for runs written before analyze
wrote it. ``calibration_points`` is every run's calibration_points.csv; ``calibrations`` every
calibration JSON (``calibrate fit -o``) found under the roots outside run folders. A view is built
the first time a query names it (binding ``read_parquet`` reads the footer of every file it covers).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import TABLES
from xstage_trace.base.run_files import MANIFEST, check_run_files, read_manifest

if TYPE_CHECKING:
    import pandas as pd

TABLE3_FILE = "table3.parquet"
POINTS_FILE = "calibration_points.csv"
CALIBRATION_JSON_MAX_BYTES = 1 << 20
# One measured configuration: the tiles' typed configuration columns, rank left out (the 8 ranks of one
# launch are one configuration); the dump name where a tile carries none.
CONFIGURATION_SQL = "coalesce(nullif(concat_ws(' ', 'dest=' || dest, 'shape=' || shape, 'schedule=' || schedule, 'variant=' || variant), ''), dump)"
# A calibration point is the same measurement in two runs when these agree.
POINT_KEYS = ("dest", "mode", "K", "B", "V", "gap_ns")
VIEWS = (*TABLES, "runs", "table3", "calibration_points", "calibrations")


def find_runs(roots: Iterable[str | Path]) -> tuple[list[Path], list[Path]]:
    """(run folders, calibration JSONs) under ``roots``: a root is a run folder itself, or a folder
    searched recursively (run folders are not searched inside). InputError for a missing root or
    when no run folder is found at all."""
    runs: dict[Path, Path] = {}
    calibrations: dict[Path, Path] = {}
    for root in map(Path, roots):
        if not root.exists():
            raise InputError(root, "no such folder", "pass run folders written by xstage-trace analyze -o, or folders holding them")
        if root.is_file():
            if root.suffix == ".json":
                calibrations.setdefault(root.resolve(), root)
                continue
            raise InputError(root, "not a folder", "pass run folders written by xstage-trace analyze -o, or folders holding them")
        for folder, dirs, files in os.walk(root):
            if MANIFEST in files:
                runs.setdefault(Path(folder).resolve(), Path(folder))
                dirs.clear()
                continue
            for f in files:
                if f.endswith(".json"):
                    calibrations.setdefault(Path(folder, f).resolve(), Path(folder, f))
    if not runs:
        raise InputError(", ".join(map(str, roots)), "no run folders (manifest.json) found", "pass run folders written by xstage-trace analyze -o, or folders holding them")
    return sorted(runs.values()), sorted(calibrations.values())


def _calibration_doc(path: Path) -> dict | None:
    """A calibration JSON written by ``calibrate fit`` as a dict, or None for any other JSON."""
    try:
        if path.stat().st_size > CALIBRATION_JSON_MAX_BYTES:
            return None
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "calibration_version" in doc and "rate_gbps" in doc else None


def _table_files(run: Path, name: str) -> list[Path]:
    """The Parquet files of one table of one run that its manifest lists: ``NAME.parquet`` or
    ``NAME/rank=R/*.parquet`` (a file the manifest does not list is never read)."""
    from xstage_trace.base.run_files import table_files

    return [Path(f) for f in table_files(run, name, read_manifest(run))]


class Collection:
    """Run folders found under some roots, queried as one dataset with DuckDB."""

    def __init__(self, roots: Iterable[str | Path]):
        import duckdb

        self.roots = [Path(r) for r in roots]
        self.run_dirs, calibration_files = find_runs(self.roots)
        self.manifests = {str(r): read_manifest(r) for r in self.run_dirs}
        for r in self.run_dirs:  # each run exactly its manifest (hashes: DuckDB reads the files as they are)
            check_run_files(r, self.manifests[str(r)])
        self.calibration_files = {str(p): d for p in calibration_files if (d := _calibration_doc(p)) is not None}
        self.con = duckdb.connect()
        self._built: set[str] = set()

    def __repr__(self) -> str:
        return f"Collection({len(self.run_dirs)} runs, {len(self.calibration_files)} calibrations)"

    def _lists(self, run: Path, rel: str) -> bool:
        """True when ``run``'s manifest lists ``rel`` (only listed files are read)."""
        return rel in (self.manifests[str(run)].get("files") or {})

    # -- views (each built on first use: binding a view reads the footer of every file it covers) --

    def _ensure(self, query: str) -> None:
        """Build the views that ``query`` names (a view built for nothing costs time, never results)."""
        for name in VIEWS:
            if name not in self._built and re.search(rf"\b(_raw_)?{name}\b", query, re.IGNORECASE):
                self._built.add(name)
                builder = getattr(self, f"_build_{name}", None)
                builder() if builder else self._build_table(name)

    def _files(self) -> None:
        import pyarrow as pa

        if "_files" not in self._built:
            files = [(str(f), str(r)) for r in self.run_dirs for name in TABLES for f in _table_files(r, name)]
            self.con.register("_files", pa.table({"file": [f for f, _ in files], "run": [r for _, r in files]}))
            self._built.add("_files")

    def _build_table(self, name: str) -> None:
        """``_raw_NAME``: one run-dataset table of every run with DuckDB's ``filename`` column;
        ``NAME``: the same with the run folder instead (a join per row: queries over many rows reduce
        ``_raw_NAME`` by filename first)."""
        import pyarrow as pa


        self._files()
        paths = [str(f) for r in self.run_dirs for f in _table_files(r, name)]
        if paths:
            self.con.execute(f"""CREATE VIEW _raw_{name} AS SELECT *
                FROM read_parquet({paths!r}, filename = true, union_by_name = true, hive_partitioning = false)""")
        else:
            self.con.register(f"_raw_{name}", pa.schema([*TABLES[name], ("filename", pa.string())]).empty_table())
        self.con.execute(f"CREATE VIEW {name} AS SELECT f.run, t.* EXCLUDE (filename) FROM _raw_{name} t JOIN _files f ON t.filename = f.file")

    def _build_runs(self) -> None:
        """``runs``: one row per run from its manifest, with the capture time (materialized: every
        query joins it). The first kernel is read only from runs that have kernels, the first probe
        slice only from runs that have none."""
        import pyarrow as pa

        m = self.manifests
        rows = lambda t: [(doc.get("tables") or {}).get(t) for doc in m.values()]  # noqa: E731
        self.con.register("_manifests", pa.table({
            "run": list(m),
            "name": [Path(r).name for r in m],
            "tool_version": [doc.get("tool_version") for doc in m.values()],
            "schema_version": pa.array([doc.get("schema_version") for doc in m.values()], pa.int32()),
            "gpus": [", ".join(doc.get("gpus") or []) for doc in m.values()],
            "calibration": [doc.get("calibration") for doc in m.values()],
            "inputs": pa.array([len(doc.get("inputs") or []) for doc in m.values()], pa.int32()),
            "warnings": pa.array([len(doc.get("warnings") or []) for doc in m.values()], pa.int32()),
            **{f"{t}_rows": pa.array(rows(t), pa.int64()) for t in ("kernels", "probes", "bursts", "tiles")},
        }))
        with_kernels = {r for r, n in zip(m, rows("kernels")) if n != 0}
        firsts = []
        for table, column, runs in (("kernels", "start_utc_ns", with_kernels), ("probe_slices", "open_gt_ns", set(m) - with_kernels)):
            files = [(str(f), r) for r in runs for f in _table_files(Path(r), table)]
            if files:
                firsts.append(f"""SELECT f.run, '{table}' AS source, min(ns) AS ns
                    FROM (SELECT filename, min({column}) AS ns FROM read_parquet({[f for f, _ in files]!r}, filename = true, union_by_name = true) GROUP BY filename) t
                    JOIN (SELECT unnest({[f for f, _ in files]!r}) AS file, unnest({[r for _, r in files]!r}) AS run) f ON t.filename = f.file
                    GROUP BY f.run""")
        first = " UNION ALL ".join(firsts) or "SELECT NULL::VARCHAR AS run, NULL::VARCHAR AS source, NULL::BIGINT AS ns WHERE false"
        self.con.execute(f"""
            CREATE TABLE runs AS
            WITH k AS (SELECT run, min(ns) AS ns FROM ({first}) WHERE source = 'kernels' GROUP BY run),
                 p AS (SELECT run, min(ns) AS ns FROM ({first}) WHERE source = 'probe_slices' GROUP BY run)
            SELECT m.run, m.name,
                   make_timestamp(CAST(coalesce(k.ns, p.ns) // 1000 AS BIGINT)) AS captured_utc,
                   CASE WHEN k.ns IS NOT NULL THEN 'first kernel (nsys)' WHEN p.ns IS NOT NULL THEN 'first probe (%globaltimer)' END AS captured_from,
                   m.* EXCLUDE (run, name)
            FROM _manifests m LEFT JOIN k USING (run) LEFT JOIN p USING (run)""")

    def _build_calibration_points(self) -> None:
        points = [str(r / POINTS_FILE) for r in self.run_dirs if self._lists(r, POINTS_FILE)]
        if points:
            self.con.execute(f"""CREATE VIEW calibration_points AS
                SELECT f.run, t.* EXCLUDE (filename) FROM read_csv({points!r}, filename = true, union_by_name = true) t
                JOIN (SELECT unnest({points!r}) AS file, unnest({[str(Path(p).parent) for p in points]!r}) AS run) f ON t.filename = f.file""")
        else:
            self.con.execute("""CREATE VIEW calibration_points AS SELECT NULL::VARCHAR AS run, NULL::VARCHAR AS dest, NULL::VARCHAR AS mode,
                NULL::BIGINT AS K, NULL::BIGINT AS B, NULL::DOUBLE AS V, NULL::DOUBLE AS gap_ns, NULL::DOUBLE AS tiss_med_ns,
                NULL::DOUBLE AS period_med_ns WHERE false""")

    def _build_calibrations(self) -> None:
        self.con.register("_calibrations", self._calibration_rows())
        self.con.execute("CREATE VIEW calibrations AS SELECT * FROM _calibrations")

    def _calibration_rows(self):
        """One row per calibration JSON: the fitted M_X and when it was measured (the capture time of
        the run folder beside it, as ``calibrate run`` writes them, else the file's modification time)."""
        import pyarrow as pa

        rows = []
        for path, doc in self.calibration_files.items():
            beside = [r for r in self.run_dirs if r.parent.resolve() == Path(path).parent.resolve()]
            floors = list((doc.get("issue_floor_ns") or {}).values())
            rows.append({
                "file": path,
                "platform": doc.get("platform"),
                "store_path": doc.get("store_path"),
                "rate_gbps": doc.get("rate_gbps"),
                "rate_uncertainty_gbps": doc.get("rate_uncertainty_gbps"),
                "capacity_bytes": doc.get("capacity_bytes"),
                "loop_overhead_ns": doc.get("loop_overhead_ns"),
                "issue_floor_median_ns": float(sorted(floors)[len(floors) // 2]) if floors else None,
                "period_err_median_pct": doc.get("period_err_median_pct"),
                "points": doc.get("points"),
                "input_sha256": (doc.get("input") or {}).get("sha256"),
                "run_beside": str(beside[0]) if len(beside) == 1 else None,
                "mtime_ns": Path(path).stat().st_mtime_ns,
            })
        schema = pa.schema([("file", pa.string()), ("platform", pa.string()), ("store_path", pa.string()), ("rate_gbps", pa.float64()),
                            ("rate_uncertainty_gbps", pa.float64()), ("capacity_bytes", pa.float64()), ("loop_overhead_ns", pa.float64()),
                            ("issue_floor_median_ns", pa.float64()), ("period_err_median_pct", pa.float64()), ("points", pa.int64()),
                            ("input_sha256", pa.string()), ("run_beside", pa.string()), ("mtime_ns", pa.int64())])
        return pa.Table.from_pylist(rows, schema=schema)

    def _build_table3(self) -> None:
        """``table3``: each run's table3.parquet; runs without one are computed (``Run.table3``)."""
        import pandas as pd
        import pyarrow as pa

        stored = [r for r in self.run_dirs if self._lists(r, TABLE3_FILE)]
        # a run without tiles has an empty Table 3 (Run.table3)
        computed = [_computed_table3(r) for r in self.run_dirs
                    if not self._lists(r, TABLE3_FILE) and (self.manifests[str(r)].get("tables") or {}).get("tiles") != 0]
        computed = [f for f in computed if len(f)]
        parts = []
        if stored:
            files = [str(r / TABLE3_FILE) for r in stored]
            parts.append(f"""SELECT f.run, t.* EXCLUDE (filename) FROM read_parquet({files!r}, filename = true, union_by_name = true) t
                             JOIN (SELECT unnest({files!r}) AS file, unnest({[str(r) for r in stored]!r}) AS run) f ON t.filename = f.file""")
        if computed:
            self.con.register("_table3_computed", pa.Table.from_pandas(pd.concat(computed, ignore_index=True), preserve_index=False))
            parts.append("SELECT * FROM _table3_computed")
        if not parts:
            parts.append("SELECT NULL::VARCHAR AS run WHERE false")
        import duckdb

        try:
            self.con.execute("CREATE VIEW table3 AS " + " UNION ALL BY NAME ".join(parts))
        except duckdb.Error as exc:  # a run's table3.parquet that DuckDB cannot read (it names the file)
            raise self._read_error(exc) from None

    # -- queries -------------------------------------------------------------------------------

    def sql(self, query: str) -> pd.DataFrame:
        """The user's SQL (``collection --sql``), sandboxed: exactly one SELECT over the views (runs,
        table3, kernels, nvtx, gpu_metrics, probes, probe_slices, bursts, tiles, calibration_points,
        calibrations) as a DataFrame. Before it runs, the connection may reach only the run tables' own
        files (``allowed_paths``), external access and extension loading are off and the configuration
        is locked, so COPY, ATTACH, INSTALL, SET, reading other files or writing any are refused."""
        import duckdb

        try:
            statements = self.con.extract_statements(query)
        except duckdb.Error as exc:
            raise InputError(None, f"query failed: {str(exc).splitlines()[0]}", "check the SQL; tables: " + ", ".join(self.tables())) from None
        if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
            what = f"{len(statements)} statements" if len(statements) != 1 else f"a {statements[0].type.name} statement"
            raise InputError(None, f"--sql refused {what}", f"--sql runs exactly one SELECT over the views ({', '.join(self.tables())}); "
                                                             "no COPY, ATTACH, INSTALL, LOAD, SET, PRAGMA or writes")
        try:
            self._ensure(query)  # views first (by name: duckdb.get_table_names cannot bind USING joins)
        except duckdb.Error as exc:
            raise self._read_error(exc) from None
        self._lock()
        return self._run(query, user=True)

    def _lock(self) -> None:
        """Limit the connection to the run tables' files and lock its configuration (once)."""
        if "_locked" in self._built:
            return
        files = [str(r / rel) for r, doc in ((r, self.manifests[str(r)]) for r in self.run_dirs) for rel in (doc.get("files") or {})]
        self.con.execute("SET autoinstall_known_extensions = false")
        self.con.execute("SET autoload_known_extensions = false")
        self.con.execute("SET allowed_paths = ?", [files])
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self._built.add("_locked")

    def _read_error(self, exc) -> InputError:
        """A run file DuckDB could not read: the one line names it and its run folder when the message does."""
        line = str(exc).splitlines()[0]
        named = next((r for r in self.run_dirs if str(r) in line), None)
        if named is not None:
            return InputError(named, f"a file of this run cannot be read ({line})", "re-run xstage-trace analyze for this run folder")
        return InputError(None, f"reading the runs failed ({line})", "check the run folders (xstage-trace collection ROOTS --query runs) and re-analyze a damaged one")

    def _run(self, query: str, user: bool = False) -> pd.DataFrame:
        import duckdb

        try:
            return self.con.sql(query).df()
        except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as exc:
            raise InputError(None, f"query failed: {str(exc).splitlines()[0]}", "check the SQL; tables: " + ", ".join(self.tables())) from None
        except (duckdb.PermissionException, duckdb.InvalidInputException) as exc:
            if not user:
                raise
            raise InputError(None, f"--sql refused: {str(exc).splitlines()[0]}",
                             f"--sql reads only the views ({', '.join(self.tables())}); no other files, extensions or settings") from None
        except duckdb.Error as exc:  # a run's file that DuckDB cannot read
            raise self._read_error(exc) from None

    def _sql(self, query: str) -> pd.DataFrame:
        """This module's own queries over the views (built first)."""
        import duckdb

        try:
            self._ensure(query)
        except duckdb.Error as exc:
            raise self._read_error(exc) from None
        return self._run(query)

    def tables(self) -> list[str]:
        """Names of the views that ``sql`` can query."""
        return sorted(VIEWS)

    def runs(self) -> pd.DataFrame:
        """One row per run folder: capture time, tool and schema version, GPUs, calibration, row counts."""
        return self._sql("SELECT * FROM runs ORDER BY captured_utc, run")

    def table3(self) -> pd.DataFrame:
        """docs/model.md §5 Table 3 of every run (one row per run and configuration), oldest capture first."""
        self._ensure("table3")
        order = ["r.captured_utc", "t.run"] + [f"t.{c}" for c in ("dest", "shape") if c in self._columns("table3")]
        return self._sql(f"SELECT r.captured_utc, t.* FROM table3 t JOIN runs r USING (run) ORDER BY {', '.join(order)}")

    def _columns(self, view: str) -> list[str]:
        return [row[0] for row in self.con.execute(f"DESCRIBE {view}").fetchall()]

    def worst(self, limit: int | None = 20) -> pd.DataFrame:
        """(run, configuration) ranked by backpressured tiles (docs/model.md §5: predicted or measured stall above
        the noise), most first; a configuration is a tile's dest, shape, schedule and variant (not its
        rank), so the ranks of one launch count together."""
        lim = "" if limit is None else f"LIMIT {int(limit)}"
        return self._sql(f"""
            WITH per_file AS (
                SELECT filename, dest, shape, schedule, variant, dump, rank, count(*) AS tiles, count(*) FILTER (WHERE backpressured) AS bp,
                       sum(predicted_stall_ns) AS pred_sum, count(predicted_stall_ns) AS pred_n, max(predicted_stall_ns) AS pred_max,
                       sum(measured_stall_ns) AS meas_sum, count(measured_stall_ns) AS meas_n
                FROM _raw_tiles GROUP BY filename, dest, shape, schedule, variant, dump, rank),
            t AS (SELECT f.run, {CONFIGURATION_SQL} AS configuration, p.* FROM per_file p JOIN _files f ON p.filename = f.file)
            SELECT t.run, r.captured_utc, configuration,
                   nullif(regexp_extract(configuration, '(^|\\s)dest=(\\S+)', 2), '') AS dest,
                   nullif(regexp_extract(configuration, '(^|\\s)shape=(\\S+)', 2), '') AS shape,
                   nullif(regexp_extract(configuration, '(^|\\s)schedule=(\\S+)', 2), '') AS schedule,
                   count(DISTINCT rank) AS ranks, sum(tiles) AS tiles, sum(bp) AS backpressured_tiles,
                   sum(bp) / sum(tiles) AS backpressured_fraction,
                   sum(pred_sum) / sum(pred_n) / 1e3 AS predicted_stall_mean_us,
                   sum(meas_sum) / sum(meas_n) / 1e3 AS measured_stall_mean_us,
                   max(pred_max) / 1e3 AS predicted_stall_max_us
            FROM t JOIN runs r USING (run)
            GROUP BY t.run, r.captured_utc, configuration
            ORDER BY backpressured_tiles DESC, backpressured_fraction DESC, t.run, configuration {lim}""")

    def calibration_drift(self) -> pd.DataFrame:
        """The fitted platform model M_X (docs/model.md §3: R, Q, T_iss^0) of every calibration JSON per
        (platform, store path), oldest first, with its drift from the first fit in percent."""
        return self._sql("""
            WITH c AS (
                SELECT c.*, coalesce(r.captured_utc, make_timestamp(c.mtime_ns // 1000)) AS measured_utc,
                       CASE WHEN r.captured_utc IS NOT NULL THEN 'run beside it' ELSE 'file mtime' END AS measured_from
                FROM calibrations c LEFT JOIN runs r ON r.run = c.run_beside)
            SELECT measured_utc, measured_from, platform, store_path, file, rate_gbps, rate_uncertainty_gbps,
                   capacity_bytes, issue_floor_median_ns, loop_overhead_ns, period_err_median_pct, points,
                   100 * (rate_gbps / first_value(rate_gbps) OVER w - 1) AS rate_drift_pct,
                   100 * (capacity_bytes / first_value(capacity_bytes) OVER w - 1) AS capacity_drift_pct,
                   100 * (issue_floor_median_ns / first_value(issue_floor_median_ns) OVER w - 1) AS issue_floor_drift_pct
            FROM c
            WINDOW w AS (PARTITION BY platform, store_path ORDER BY measured_utc, file
                         ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
            ORDER BY platform, store_path, measured_utc, file""")

    def point_drift(self) -> pd.DataFrame:
        """Calibration points of every run against the same point (dest, mode, K, B, V, gap) in the
        earliest run that measured it: per run and store path, the points, how many of them an earlier
        run measured, and over those the median drift of the issue time and of the period in percent."""
        keys = ", ".join(POINT_KEYS)
        return self._sql(f"""
            WITH p AS (SELECT p.*, r.captured_utc FROM calibration_points p JOIN runs r USING (run)),
                 d AS (SELECT run, captured_utc, dest, row_number() OVER w > 1 AS compared,
                              100 * (tiss_med_ns / first_value(tiss_med_ns) OVER w - 1) AS tiss_drift_pct,
                              100 * (period_med_ns / first_value(period_med_ns) OVER w - 1) AS period_drift_pct
                       FROM p WINDOW w AS (PARTITION BY {keys} ORDER BY captured_utc, run
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
            SELECT captured_utc, run, dest, count(*) AS points, count(*) FILTER (WHERE compared) AS points_compared,
                   median(tiss_drift_pct) FILTER (WHERE compared) AS tiss_drift_med_pct,
                   median(period_drift_pct) FILTER (WHERE compared) AS period_drift_med_pct,
                   max(abs(period_drift_pct)) FILTER (WHERE compared) AS period_drift_max_abs_pct
            FROM d GROUP BY captured_utc, run, dest ORDER BY dest, captured_utc, run""")


def _computed_table3(run: Path) -> pd.DataFrame:
    """``open_run(run).table3()`` with the run column; a run whose tables cannot be read is an InputError."""
    import pyarrow as pa

    from xstage_trace.dataset.api import open_run

    try:
        return open_run(run).table3().assign(run=str(run))
    except (OSError, pa.ArrowException) as exc:
        raise InputError(run, f"run tables not readable ({exc.__class__.__name__}: {str(exc).splitlines()[0]})", "re-run xstage-trace analyze for this run") from None


def open_collection(roots: str | Path | Iterable[str | Path]) -> Collection:
    """Open every run folder under ``roots`` (one folder, or a list of them) as one DuckDB-backed
    dataset (``Collection``)."""
    return Collection([roots] if isinstance(roots, (str, Path)) else roots)
