"""The Python API over a run folder: what the CLI, the dashboard, the reports and notebooks share.

In the manner of HTA's ``TraceAnalysis``: one façade over a run dataset (docs/run-dataset.md)
whose methods each return a pandas DataFrame with the documented schema::

    import xstage_trace
    run = xstage_trace.open_run("fused.xstage-run")
    run.table3()          # docs/model.md §5 Table 3, one row per configuration
    run.tiles()           # one row per tile (docs/model.md §5)
    run.bursts()          # one row per burst with the §4 audit
    run.verdicts()        # the verdict, cause and stall per configuration and schedule
    run.store_wait()      # DeepGEMM-style staging-buffer waits against the calibrated path (§4, §5)
    run.piggyback()       # FlashAttention's Q-loop piggyback audit (§7)
    run.tile_timeline()   # where the per-tile stall error comes from (docs/tile-error.md)

Tables are read lazily, once each, from the folder's Parquet files; nothing is recomputed that
``analyze`` already wrote.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from xstage_trace.base.errors import InputError


class Run:
    """One run dataset folder written by ``xstage-trace analyze``."""

    def __init__(self, run_dir: str | Path):
        from xstage_trace.base.run_files import check_run_files, read_manifest

        self.path = Path(run_dir)
        self._read: dict[str, pa.Table] = {}
        # manifest.json: inputs with their hashes, GPUs, alignment per rank, warnings, table sizes.
        # Read here: not a run, a damaged or a newer manifest is a one-line error before any table is read.
        self.manifest: dict = read_manifest(self.path)
        check_run_files(self.path, self.manifest)  # exactly its manifest: nothing unlisted, nothing missing

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    def table(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """One run-dataset table as Arrow (``kernels``, ``nvtx``, ``gpu_metrics``, ``probes``,
        ``probe_slices``, ``bursts``, ``tiles``), read on first use (a run with 10 M probe
        records opens its small tables without reading the probes). ``columns``: only those, in
        that order; while the table was not read whole, only they are read from its files (a count
        or a sum over a large table without decoding its other columns), and not kept."""
        from xstage_trace.base.schema import TABLES
        from xstage_trace.base.run_files import read_table

        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables: {', '.join(TABLES)}")
        if columns is not None:
            missing = [c for c in columns if c not in TABLES[name].names]
            if missing:
                raise KeyError(f"table {name!r} has no column {missing[0]!r}")
            if name not in self._read:
                return self._columns(name, list(columns))
            return self._read[name].select(list(columns))
        if name not in self._read:
            self._read[name] = read_table(self.path, name)
        return self._read[name]

    def _columns(self, name: str, columns: list[str]) -> pa.Table:
        """``columns`` of table ``name`` from its files, each checked against its sha256 as ``table`` checks
        them (that every listed file is there and no other was checked when the run was opened), typed by
        the schema (a column a file lacks: nulls)."""
        from xstage_trace.base.run_files import check_listed_file, table_files
        from xstage_trace.base.schema import conform, empty_table

        parts = []
        for f in table_files(self.path, name, self.manifest):
            path = check_listed_file(self.path, self.manifest, Path(f).relative_to(self.path).as_posix())
            parts.append(conform(name, _read_result(path, lambda p: _parquet_columns(p, columns))).select(columns))
        return pa.concat_tables(parts) if parts else empty_table(name).select(columns)

    def _frame(self, name: str) -> pd.DataFrame:
        return self.table(name).to_pandas()

    def kernels(self) -> pd.DataFrame:
        """nsys kernel launches (timing scope: kernel time, nsys clock)."""
        return self._frame("kernels")

    def nvtx(self) -> pd.DataFrame:
        """NVTX ranges from the nsys export: name, domain (None for the default domain), times, thread."""
        return self._frame("nvtx")

    def gpu_metrics(self) -> pd.DataFrame:
        """GPU metric samples (Tensor Active, SM Active, PCIe/NVLink throughput, ...)."""
        return self._frame("gpu_metrics")

    def probes(self) -> pd.DataFrame:
        """Decoded probe records on the run's time base (``t_ns``)."""
        return self._frame("probes")

    def probe_slices(self) -> pd.DataFrame:
        """One row per (dump, CTA, role) probe slice: anchors, counts, ns per cycle."""
        return self._frame("probe_slices")

    def dumps(self) -> pd.DataFrame:
        """One row per probe dump: rank, GPU, the kernel it lies in, its typed run configuration."""
        return self._frame("dumps")

    def bursts(self) -> pd.DataFrame:
        """Remote-store bursts with the §4 audit (ρ, Δb, q, guard)."""
        return self._frame("bursts")

    def tiles(self) -> pd.DataFrame:
        """Per-tile spans and predicted / measured stall (docs/model.md §5)."""
        return self._frame("tiles")

    def table3(self) -> pd.DataFrame:
        """docs/model.md §5 Table 3 (``base.schema.TABLE3``, ns): one row per configuration and schedule."""
        return self._result("table3")

    def verdicts(self) -> pd.DataFrame:
        """docs/model.md §5, §12: the verdict, cause and stall per configuration and schedule (``base.schema.VERDICTS``, ns)."""
        return self._result("verdicts")

    def link_whatif(self) -> pd.DataFrame:
        """docs/model.md §13: per host-mapped configuration × alternative (as run, fewer CTAs, prefetch, link floor)
        the predicted kernel time, stall and gain (``base.schema.LINK_WHATIF``, ns)."""
        return self._result("link_whatif")

    def _result(self, name: str) -> pd.DataFrame:
        from xstage_trace.base.schema import RESULTS
        from xstage_trace.base.run_files import check_listed_file

        f = check_listed_file(self.path, self.manifest, f"{name}.parquet")  # only the bytes the manifest hashed
        return _read_result(f, _parquet_frame) if f else RESULTS[name].empty_table().to_pandas()

    def probe_spans(self, dump: str, events=("mainloop", "slot_wait", "rs"), start_ns: float | None = None,
                    end_ns: float | None = None) -> pd.DataFrame:
        """Begin/end probe spans of one dump (one kernel launch) for ``events``, those overlapping
        [start_ns, end_ns] (each bound optional): rank, dump, cta, sm_id, role, event, tile,
        start_ns, end_ns, duration_ns and the end record's payload. The dump and events are
        selected in Arrow before the records are paired, so one kernel of a large run is cheap."""
        import pyarrow.compute as pc

        from xstage_trace.analysis.spans import pair_spans

        keys = ["rank", "dump", "cta", "sm_id", "role", "event", "tile"]
        cols = [*keys, "start_ns", "end_ns", "duration_ns", "payload"]
        t = self.table("probes")
        if t.num_rows == 0:
            return pd.DataFrame(columns=cols)
        events = [str(e) for e in events]
        mask = pc.and_(_in_values(t["dump"], [dump]), _in_values(t["event"], events))
        p = t.filter(mask).select([*keys, "kind", "payload", "t_ns"]).to_pandas()
        p["dump"] = p["dump"].astype(str)
        s = pair_spans(p, events, keys).rename(columns={"start": "start_ns", "end": "end_ns", "duration": "duration_ns"})
        s["event"] = s["event"].astype(str)
        if start_ns is not None:
            s = s[s["end_ns"] >= start_ns]
        if end_ns is not None:
            s = s[s["start_ns"] <= end_ns]
        return s[cols].reset_index(drop=True)

    def calibration_path(self) -> Path | None:
        """The calibration JSON the run was analysed with: the run's own copy (calibration.json, checked
        against the manifest's sha256) when it has one; for runs written before the copy, the file the
        manifest names (``calibration``), tried from the current folder, then from the run folder's
        parent; None when there was none or it is gone."""
        from xstage_trace.base.run_files import CALIBRATION_COPY, check_listed_file

        if self.manifest.get("calibration_file") == CALIBRATION_COPY:
            return check_listed_file(self.path, self.manifest, CALIBRATION_COPY)
        return self.calibration_origin()

    def calibration_origin(self) -> Path | None:
        """The user's calibration file the manifest names (``calibration``), where it is now: tried from
        the current folder, then from the run folder's parent (the folder beside it may hold the
        calibration's own points); None when there was none or it is gone."""
        name = self.manifest.get("calibration")
        if not name or not isinstance(name, str):
            return None
        return next((f.resolve() for f in (Path(name), self.path.parent / name) if f.is_file()), None)

    def calibration_document(self) -> dict | None:
        """That calibration JSON as a dict, read with the checks of a user's calibration file
        (collectors/calibration_io.read_document: InputError when the run's copy is damaged), or None
        (no calibration, an older run whose file is gone or unreadable)."""
        from xstage_trace.collectors.calibration_io import read_document
        from xstage_trace.base.run_files import CALIBRATION_COPY

        f = self.calibration_path()
        if f is None:
            return None
        if self.manifest.get("calibration_file") == CALIBRATION_COPY:
            return read_document(f)
        try:
            return read_document(f)
        except InputError:
            return None

    def calibration(self) -> pd.DataFrame:
        """Calibration points reduced from calibration-benchmark dumps (empty for other runs)."""
        from xstage_trace.base.run_files import check_listed_file

        f = check_listed_file(self.path, self.manifest, "calibration_points.csv")
        return _read_result(f, pd.read_csv) if f else pd.DataFrame()

    def _calibrations(self, calibrations) -> list[Path]:
        """The calibration files an analysis of this run uses: ``calibrations``, else the run's own."""
        paths = [Path(c) for c in (calibrations or [])] or ([self.calibration_path()] if self.calibration_path() else [])
        if not paths:
            raise InputError(self.path, "was analyzed without a calibration and none was given",
                             "pass --calibration CALIBRATION.json (the store path's, e.g. sample_traces/h200_calibration/calibration_host.json)")
        return paths

    def store_wait(self, calibrations=None) -> pd.DataFrame:
        """docs/model.md §4, §5 for kernels whose tiles store through one staging buffer per CTA (DeepGEMM sm_90):
        per case (dest, shape) the calibrated path's predicted stall of each tile's store round against the
        measured staging-buffer wait and the next tile's mainloop excess (``analysis.stall.store_wait_summary``).
        ``calibrations``: calibration JSON files (one per store path; default: the run's own)."""
        from xstage_trace.analysis.stall import store_wait_summary, store_wait_vs_model
        from xstage_trace.dataset.calibration import load_platforms

        tiles, bursts = self.tiles(), self.bursts()
        if tiles.empty or bursts.empty:
            raise InputError(self.path, "holds no tiles with store bursts", "analyze probe dumps of a kernel with mainloop, store-wait and store events first")
        paths = self._calibrations(calibrations)
        dests = [str(d) for d in tiles["dest"].dropna().unique()]
        models = load_platforms(paths, lambda model: [d for d in dests if str(model.store_path).startswith(d)])
        if not models:
            raise InputError(paths[0], f"calibrates none of the run's destinations {sorted(dests)}",
                             "pass the calibration of the path the kernel stored to (e.g. calibration_host.json)")
        return store_wait_summary(store_wait_vs_model(tiles, bursts, models), bursts)

    def piggyback(self, calibrations=None, control: str = "local") -> tuple[pd.DataFrame, pd.DataFrame]:
        """docs/model.md §7, the FlashAttention Q-loop piggyback audit: (per tile, per shape and store path) from the
        run's FA3/FA4 tiles and ``calibrations`` (default: the run's own), against the ``control`` destination's Q-loops
        (``analysis.piggyback.piggyback_audit``)."""
        from xstage_trace.analysis.piggyback import piggyback_audit, qloop_tiles
        from xstage_trace.dataset.calibration import load_platforms

        tiles = qloop_tiles(self.probes(), self.dumps())
        if tiles.empty:
            raise InputError(self.path, "holds no FA3 Q-loop tiles (mainloop and epilogue spans with seqlen/causal/block sizes in the dump label)",
                             "analyze probe dumps written by sample_traces/h200_fa3/run/driver.cu (recipe fa3)")
        if not (tiles["dest"] == control).any():
            raise InputError(self.path, f"has no control dumps (dest={control})", "trace each shape once with O in local HBM, or name the control's dest with --control")
        return piggyback_audit(tiles, load_platforms(self._calibrations(calibrations), lambda model: [str(model.store_path)]), control)

    def tile_timeline(self) -> pd.DataFrame:
        """The per-tile slot-cycle timeline (docs/tile-error.md, ``analysis.tile_error.tile_timeline``) of the run's tiles."""
        from xstage_trace.analysis.tile_error import tile_timeline
        from xstage_trace.analysis.tiles import tile_spans
        from xstage_trace.pipeline.analyses import group_lifecycle

        tiles = self.tiles()
        if tiles.empty:
            raise InputError(self.path, "the run has no tiles (no mainloop probes)", "analyze probe dumps of a fused kernel into it")
        control = self.dumps()[["rank", "dump", "is_control"]]  # RunConfig.is_control of each dump, as analyze parsed it
        control = control.assign(dump=control["dump"].astype(str))
        tiles = tiles.assign(dump=tiles["dump"].astype(str)).merge(control, on=["rank", "dump"], how="left")
        tiles["is_control"] = tiles["is_control"].fillna(False).astype(bool)
        probes = self.probes()
        try:
            lifecycle = group_lifecycle(probes, self.dumps())
        except ValueError as e:
            raise InputError(self.path, f"holds the tiles of several kernels ({e})", "analyze one kernel's dumps into a run for its tile timeline") from None
        return tile_timeline(tile_spans(probes, lifecycle), tiles)

    def alignment(self) -> pd.DataFrame:
        """Clock alignment per rank: offset, drift, residual, dumps matched."""
        rows = [dict(rank=r, **a) for r, a in (self.manifest.get("alignment") or {}).items()]
        return pd.DataFrame(rows)

    def warnings(self) -> list[str]:
        """What went wrong or was approximated while the run was collected."""
        return list(self.manifest.get("warnings") or [])


def _read_result(path: Path, reader) -> pd.DataFrame:
    """A result file of the run (table3.parquet, calibration_points.csv); InputError naming it when unreadable."""
    try:
        return reader(path)
    except Exception as exc:  # pandas and pyarrow raise many parser types
        raise InputError(path, f"not readable ({exc.__class__.__name__})", "re-run xstage-trace analyze on the original inputs to write the run again") from None


def _parquet_columns(path: Path, columns: list[str]) -> pa.Table:
    """Those of ``columns`` that one Parquet file holds, read as one file (no pyarrow.dataset)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        return f.read(columns=[c for c in columns if c in f.schema_arrow.names])


def _parquet_frame(path: Path) -> pd.DataFrame:
    """One Parquet file as pandas, as ``pd.read_parquet`` gives it (Arrow's conversion), read as one file:
    without pyarrow.dataset's import and discovery (a result file's first read on the dashboard)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        return f.read().to_pandas()


def _in_values(column: pa.ChunkedArray, values: list[str]) -> pa.ChunkedArray:
    """Boolean mask: ``column`` is one of ``values``. Dictionary columns are matched on their
    dictionaries and then on the integer indices (25× faster than decoding 10 M strings)."""
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        return pc.is_in(column, value_set=pa.array(values))
    masks = []
    for chunk in column.chunks:  # a few dozen Arrow chunks, each vectorized
        keep = pc.indices_nonzero(pc.is_valid(pc.index_in(chunk.dictionary, value_set=pa.array(values))))
        masks.append(pc.is_in(chunk.indices, value_set=keep.cast(chunk.indices.type)))
    return pa.chunked_array(masks, type=pa.bool_())


def open_run(run_dir: str | Path) -> Run:
    """Open a run dataset folder (``xstage-trace analyze -o DIR``) for analysis in Python."""
    return Run(run_dir)
