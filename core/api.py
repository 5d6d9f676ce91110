"""The Python API over a run folder: what the CLI, the dashboard, the reports and notebooks share.

In the manner of HTA's ``TraceAnalysis``: one façade over a run dataset (docs/run-dataset.md)
whose methods each return a pandas DataFrame with the documented schema::

    import xstage_trace
    run = xstage_trace.open_run("fused.xstage-run")
    run.table3()          # spec §5 Table 3, one row per configuration
    run.tiles()           # one row per tile (spec §5)
    run.bursts()          # one row per burst with the §4 audit

Tables are read lazily, once each, from the folder's Parquet files; nothing is recomputed that
``analyze`` already wrote.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
import pyarrow as pa

from xstage_trace.base.errors import InputError


class Run:
    """One run dataset folder written by ``xstage-trace analyze``."""

    def __init__(self, run_dir: str | Path):
        from xstage_trace.collectors.dataset import MANIFEST, is_run_dir

        self.path = Path(run_dir)
        self._read: dict[str, pa.Table] = {}
        if not is_run_dir(self.path):
            raise InputError(self.path, f"not an xstage run dataset (no {MANIFEST})", "pass a folder written by xstage-trace analyze -o")

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    @functools.cached_property
    def manifest(self) -> dict:
        """manifest.json: inputs with their hashes, GPUs, alignment per rank, warnings, table sizes."""
        from xstage_trace.collectors.dataset import read_manifest

        return read_manifest(self.path)

    def table(self, name: str) -> pa.Table:
        """One run-dataset table as Arrow (``kernels``, ``nvtx``, ``gpu_metrics``, ``probes``,
        ``probe_slices``, ``bursts``, ``tiles``), read on first use (only that table's files)."""
        from xstage_trace.base.schema import TABLES
        from xstage_trace.collectors.dataset import read_table

        if name not in TABLES:
            raise KeyError(f"no table {name!r}; tables: {', '.join(TABLES)}")
        if name not in self._read:
            self.manifest  # schema check before any table is read
            self._read[name] = read_table(self.path, name)
        return self._read[name]

    def _frame(self, name: str) -> pd.DataFrame:
        return self.table(name).to_pandas()

    def kernels(self) -> pd.DataFrame:
        """nsys kernel launches (timing scope: kernel time, nsys clock)."""
        return self._frame("kernels")

    def nvtx(self) -> pd.DataFrame:
        """NVTX ranges from the nsys export."""
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
        """Per-tile spans and predicted / measured stall (spec §5)."""
        return self._frame("tiles")

    def table3(self) -> pd.DataFrame:
        """Spec §5 Table 3: one row per configuration, medians per schedule, kernel times."""
        f = self.path / "table3.parquet"
        return pd.read_parquet(f) if f.is_file() else pd.DataFrame()

    def calibration(self) -> pd.DataFrame:
        """Calibration points reduced from calibration-benchmark dumps (empty for other runs)."""
        f = self.path / "calibration_points.csv"
        return pd.read_csv(f) if f.is_file() else pd.DataFrame()

    def alignment(self) -> pd.DataFrame:
        """Clock alignment per rank: offset, drift, residual, dumps matched."""
        rows = [dict(rank=r, **a) for r, a in (self.manifest.get("alignment") or {}).items()]
        return pd.DataFrame(rows)

    def warnings(self) -> list[str]:
        """What went wrong or was approximated while the run was collected."""
        return list(self.manifest.get("warnings") or [])


def open_run(run_dir: str | Path) -> Run:
    """Open a run dataset folder (``xstage-trace analyze -o DIR``) for analysis in Python."""
    return Run(run_dir)
