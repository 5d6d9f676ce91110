"""Nsight Systems exports: real H200 and RTX 3080 captures, parquet folders, .nsys-rep, bad exports."""

from __future__ import annotations

from pathlib import Path

import sqlite3
import stat

import pytest

from conftest import REFERENCE, mock_sqlite, reference_sqlite, run_sql
from xstage_trace.collectors.nsys_names import normalize_metric
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.collectors.nsys_rep import export_report
from xstage_trace.base.errors import InputError


def test_h200_export():
    e = read_nsys_export(reference_sqlite())
    assert e.kernels.num_rows == 17
    assert e.nvtx.num_rows == 16
    metrics = set(e.gpu_metrics.column("metric").to_pylist())
    assert {"Tensor Active", "SM Active", "PCIe TX", "DRAM Read"} <= metrics
    assert e.gpus == [{"device_id": 0, "name": "NVIDIA H200", "sm_count": 132, "clock_hz": 1980000000}]
    assert (e.nsys_version, e.schema_version) == ("2025.3.2.0", "3.20.3")
    k = e.kernels.to_pandas()
    # Every benchmark launch sits in the NVTX range it was launched from; the warm-up kernel in none.
    assert k["nvtx_range"].notna().sum() == 16
    assert k.loc[k["nvtx_range"].notna(), "nvtx_range"].str.match(r"(local|host) K=\d+ B=\d+ G=").all()
    assert (k["start_utc_ns"] - k["start_ns"] == 1795938905139826990).all()
    assert e.warnings == []


def test_rtx3080_export_has_no_nvtx_and_no_metrics():
    e = read_nsys_export(mock_sqlite())
    assert e.kernels.num_rows == 2 and e.nvtx.num_rows == 0 and e.gpu_metrics.num_rows == 0
    assert e.gpus[0]["name"] == "NVIDIA GeForce RTX 3080"
    assert any("NVTX" in w for w in e.warnings) and any("GPU metrics" in w for w in e.warnings)


def test_metric_names_across_versions():
    assert normalize_metric("SMs Active [Throughput %]") == "SM Active"
    assert normalize_metric("SM Active") == "SM Active"
    assert normalize_metric("SMs Active") == "SM Active"
    assert normalize_metric("Tensor Active [Throughput %]") == "Tensor Active"
    assert normalize_metric("Tensor Active / FP16 Active") == "Tensor Active"
    assert normalize_metric("PCIe TX Throughput [Throughput %]") == "PCIe TX"
    assert normalize_metric("Compute Warps in Flight [Avg]") == "Compute Warps in Flight [Avg]"


def test_parquetdir_export_reads_the_same(tmp_path):
    con = sqlite3.connect(reference_sqlite())
    out = tmp_path / "pqtdir"
    out.mkdir()
    import pandas as pd

    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        df = pd.read_sql(f"SELECT * FROM [{name}]", con)
        if len(df.columns):
            df.to_parquet(out / f"{name}.parquet")
    a, b = read_nsys_export(reference_sqlite()), read_nsys_export(out)
    assert (b.kernels.num_rows, b.nvtx.num_rows, b.gpu_metrics.num_rows) == (a.kernels.num_rows, a.nvtx.num_rows, a.gpu_metrics.num_rows)
    assert b.kernels.column("nvtx_range").to_pylist() == a.kernels.column("nvtx_range").to_pylist()


def test_nsys_rep_uses_the_cached_export():
    path, info = export_report(REFERENCE / "h200_burst_gap_quick.nsys-rep")
    shipped = Path(info["export"])  # the compressed export beside the report, verified by its sidecar
    assert info["cached"] and shipped.name.startswith("h200_burst_gap_quick.nsys-rep.") and shipped.name.endswith(".sqlite.zst")
    assert path == reference_sqlite()  # read from its decompressed copy


def test_nsys_rep_without_nsys(tmp_copy, monkeypatch, tmp_path):
    rep = tmp_copy(REFERENCE / "h200_burst_gap_quick.nsys-rep")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("xstage_trace.collectors.nsys_rep._NSYS_GLOBS", ())
    with pytest.raises(InputError) as e:
        export_report(rep)
    assert "nsys export --type sqlite" in str(e.value)


def test_nsys_rep_export_failure_leaves_nothing(tmp_copy, tmp_path, monkeypatch):
    rep = tmp_copy(REFERENCE / "h200_burst_gap_quick.nsys-rep")
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'NVIDIA Nsight Systems version 2026.2.1'; exit 0; fi\n"
                    "for a; do out=$prev; prev=$a; done\necho partial > \"$(echo $@ | awk '{print $(NF-1)}')\"\necho 'ProtobufParseException' >&2; exit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(InputError) as e:
        export_report(rep, nsys=str(fake))
    assert "exited 1" in str(e.value)
    assert sorted(p.name for p in rep.parent.iterdir() if p.name.startswith(".") or p.suffix == ".sqlite") == []


def test_not_an_nsys_export(tmp_path):
    p = run_sql(tmp_path / "other.sqlite", "CREATE TABLE t (a INTEGER)")
    with pytest.raises(InputError) as e:
        read_nsys_export(p)
    assert "not an Nsight Systems export" in str(e.value)


def test_garbage_file_is_not_sqlite(tmp_path):
    p = tmp_path / "x.sqlite"
    p.write_bytes(b"hello" * 100)
    with pytest.raises(InputError):
        read_nsys_export(p)


def test_export_without_kernels(tmp_copy):
    p = run_sql(tmp_copy(reference_sqlite(), "nokernels.sqlite"), "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(InputError) as e:
        read_nsys_export(p)
    assert "no kernels" in str(e.value)


def test_old_schema_kernel_table(tmp_copy):
    p = run_sql(tmp_copy(reference_sqlite(), "old.sqlite"), "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN shortName")
    with pytest.raises(InputError) as e:
        read_nsys_export(p)
    assert "shortName" in str(e.value) and "2022.4" in str(e.value)


def test_missing_optional_tables_are_reported(tmp_copy):
    p = run_sql(tmp_copy(reference_sqlite(), "trimmed.sqlite"),
                *(f"DROP TABLE {t}" for t in ("GPU_METRICS", "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_RUNTIME")))
    e = read_nsys_export(p)
    assert e.kernels.num_rows == 17 and e.gpu_metrics.num_rows == 0
    assert any("GPU metrics" in w for w in e.warnings)
    assert any("TARGET_INFO_GPU" in w for w in e.warnings)
    assert any("RUNTIME" in w for w in e.warnings)
    # This export's TARGET_INFO_CUDA_DEVICE has no SM count: the GPU is known only by its index.
    assert e.gpus == [{"device_id": 0, "name": "unknown", "sm_count": None, "clock_hz": None}]
