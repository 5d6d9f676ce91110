"""NVTX domains end to end: the reader names each range's domain (per process, from the
NvtxDomainCreate events), attributes kernels to their launch range with its domain, and
``analyze --nvtx NAME --nvtx-domain DOMAIN`` keeps exactly the kernels launched under the ranges of
that domain.

The export is a small SQLite file written here. Its tables are created with the CREATE TABLE
statements of the shipped real H200 export (nsys 2025.3), so the column layout is nsys's own; the
rows are hand-chosen, and the expected kernels below follow from their launch times by hand.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FUSED
from xstage_trace import open_run
from xstage_trace.collectors.nsys_reader import read_nsys_export
from xstage_trace.pipeline.runner import analyze_inputs

TABLES = ("NVTX_EVENTS", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "META_DATA_EXPORT",
          "TARGET_INFO_SESSION_START_TIME")

PID_A, PID_B = 4242 << 24, 777 << 24  # serialized globalPid: process id above the low 24 bits
T1, T2 = PID_A + 4242, PID_A + 4250  # two threads of process A
T3 = PID_B + 777  # a thread of process B

# StringIds: registered strings (NVTX domain and range names) and kernel names k0 … k7.
STRINGS = {1: "torch", 2: "step", **{10 + i: f"k{i}" for i in range(8)}}

# (start, end, eventType, text, textId, globalTid, domainId): 75 = NvtxDomainCreate, 59 = push/pop, 60 = start/end.
# Domain ids are per process: id 1 is "xstage" in process A and "nccl" in process B; "torch" is a registered string
# created on A's second thread; id 9 is never created (domain unknown).
NVTX_ROWS = [
    (5, None, 75, "xstage", None, T1, 1),
    (6, None, 75, None, 1, T2, 2),
    (7, None, 75, "nccl", None, T3, 1),
    (100, 1000, 59, "step", None, T1, 0),   # R0 default domain
    (200, 400, 59, "step", None, T1, 1),    # R1 xstage
    (500, 700, 59, None, 2, T1, 2),         # R2 torch, name registered ("step")
    (250, 300, 59, "gemm", None, T1, 1),    # R3 xstage, inside R1
    (350, 480, 59, "gemm", None, T1, 2),    # R4 torch: starts inside R1, ends after it (domains need not nest)
    (150, 900, 60, "step", None, T2, 1),    # R5 xstage start/end range on thread 2
    (100, 200, 59, "step", None, T3, 1),    # R6 nccl (process B)
    (900, 950, 59, "orphan", None, T1, 9),  # R7 domain id without a create event
]
RANGE_DOMAINS = {  # (name, start) → domain, by hand from the rows above
    ("step", 100): [None, "nccl"], ("step", 200): ["xstage"], ("step", 500): ["torch"], ("gemm", 250): ["xstage"],
    ("gemm", 350): ["torch"], ("step", 150): ["xstage"], ("orphan", 900): [None],
}

# Kernel i is launched (cudaLaunchKernel) at LAUNCHES[i] on the given thread and runs on the GPU much later,
# all in launch order, so that the GPU time says nothing about the range.
LAUNCHES = [(50, T1), (220, T1), (260, T1), (380, T1), (450, T1), (550, T1), (800, T1), (160, T2)]
# Innermost range (latest-started range of any domain containing the launch, on the launching thread), by hand.
INNERMOST = [(None, None), ("step", "xstage"), ("gemm", "xstage"), ("gemm", "torch"), ("gemm", "torch"),
             ("step", "torch"), ("step", None), ("step", "xstage")]


def _real_schema() -> dict[str, str]:
    """CREATE TABLE statements of the tables above, from the shipped real export."""
    from xstage_trace.collectors.compressed import decompressed_export

    con = sqlite3.connect(decompressed_export(next((FUSED / "traced").glob("*.sqlite.zst"))))
    try:
        return dict(con.execute(f"SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN {TABLES}").fetchall())
    finally:
        con.close()


def _write_export(path: Path) -> Path:
    schema = _real_schema()
    assert set(schema) == set(TABLES)
    con = sqlite3.connect(path)
    for sql in schema.values():
        con.execute(sql)
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)", STRINGS.items())
    con.executemany("INSERT INTO META_DATA_EXPORT (name, value) VALUES (?, ?)",
                    [("EXPORT_PRODUCT_VERSION", "2025.3.2.0"), ("EXPORT_SCHEMA_VERSION", "3.20.3")])
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs, utcTime, localTime) "
                "VALUES (1795945788000000000, '2026-11-29T09:49:48', '2026-11-29T09:49:48')")
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    NVTX_ROWS)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue) "
                    "VALUES (?, ?, 1, ?, ?, 2, 0)", [(t, t + 5, tid, 100 + i) for i, (t, tid) in enumerate(LAUNCHES)])
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, "
        "shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, "
        "localMemoryPerThread, localMemoryTotal, gridId) VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?)",
        [(5000 + 100 * i, 5050 + 100 * i, 100 + i, PID_A, 10 + i, 10 + i, i) for i in range(len(LAUNCHES))])
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    return _write_export(tmp_path_factory.mktemp("nvtx_domains") / "domains.sqlite")


def _kept(export: Path, out: Path, nvtx: str | None, domain: str | None) -> set[str]:
    analyze_inputs([export], out, nvtx=nvtx, nvtx_domain=domain)
    return set(open_run(out).kernels()["name"])


def test_ranges_carry_their_process_domain_and_registered_names(export):
    e = read_nsys_export(export)
    got: dict = {}
    for name, start, domain in zip(e.nvtx["name"].to_pylist(), e.nvtx["start_ns"].to_pylist(), e.nvtx["domain"].to_pylist()):
        got.setdefault((name, start), []).append(domain)
    assert {k: sorted(v, key=str) for k, v in got.items()} == {k: sorted(v, key=str) for k, v in RANGE_DOMAINS.items()}
    assert any("no NvtxDomainCreate" in w and "[9]" in w for w in e.warnings)


def test_kernels_name_their_innermost_launch_range_and_its_domain(export):
    k = read_nsys_export(export).kernels.sort_by("name")
    assert list(zip(k["nvtx_range"].to_pylist(), k["nvtx_domain"].to_pylist())) == INNERMOST
    assert list(zip(k["launch_ns"].to_pylist(), k["launch_global_tid"].to_pylist())) == LAUNCHES


@pytest.mark.parametrize("nvtx, domain, kernels", [
    ("step", "xstage", {"k1", "k2", "k3", "k7"}),  # k3: launched inside xstage step though its innermost range is torch gemm
    ("step", "torch", {"k5"}),
    ("step", None, {"k1", "k2", "k3", "k4", "k5", "k6", "k7"}),  # any domain: the default-domain step covers thread 1
    (None, "torch", {"k3", "k4", "k5"}),  # a domain alone: every range of it
    ("gemm", "xs*", {"k2"}),
])
def test_nvtx_filter_keeps_the_kernels_launched_under_the_domains_ranges(export, tmp_path, nvtx, domain, kernels):
    assert _kept(export, tmp_path / "r", nvtx, domain) == kernels


def test_filtered_run_keeps_the_ranges_inside_the_matching_ones_and_records_the_domain(export, tmp_path):
    _kept(export, tmp_path / "r", "step", "xstage")
    run = open_run(tmp_path / "r")
    assert sorted(zip(run.nvtx()["name"], run.nvtx()["start_ns"])) == [("gemm", 250), ("step", 150), ("step", 200)]
    f = run.manifest["nvtx_filter"]
    assert (f["pattern"], f["domain"], f["ranges_matched"], f["kernels_kept"], f["kernels_total"]) == ("step", "xstage", 2, 4, 8)


def _analyze_cli(export: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xstage_trace", "analyze", str(export), "-o", str(out), "--json", *options],
                          capture_output=True, text=True, timeout=600)


def test_cli_nvtx_domain_option(export, tmp_path):
    r = _analyze_cli(export, tmp_path / "r", "--nvtx", "step", "--nvtx-domain", "torch")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kernels"] == 1
    assert set(open_run(tmp_path / "r").kernels()["name"]) == {"k5"}


@pytest.mark.parametrize("options, listed", [
    (("--nvtx-domain", "cuda"), ["domains: default, 'nccl', 'torch', 'xstage'"]),  # no such domain: the domains are listed
    (("--nvtx", "attention", "--nvtx-domain", "xstage"), ["2 range names in domain 'xstage'", "'gemm'", "'step'"]),
    (("--nvtx", "orphan", "--nvtx-domain", "torch"), ["'step'", "'gemm'"]),  # the name exists, but in another domain
])
def test_nothing_matching_is_bad_input_naming_what_exists(export, tmp_path, options, listed):
    r = _analyze_cli(export, tmp_path / "r", *options)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and all(s in r.stderr for s in listed), r.stderr
    assert not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def full_run(export, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nvtx_domains_run") / "all.run"
    analyze_inputs([export], out)
    return out


def test_export_puts_each_domain_of_a_thread_on_its_own_nesting_track(full_run):
    from xstage_trace.reports.trace_model import build_timeline

    tl = build_timeline(open_run(full_run))
    names = dict(zip(tl.tracks["track_id"], tl.tracks["name"]))
    s = tl.spans.assign(track=tl.spans["track_id"].map(names))
    nvtx = s[s["track"].str.startswith("NVTX · thread")]
    on = {(r.name, r.start_ns): r.track for r in nvtx[nvtx["track"].str.startswith("NVTX · thread 4242")].itertuples()}
    assert set(nvtx["track"]) == {"NVTX · thread 4242", "NVTX · thread 4242 · xstage", "NVTX · thread 4242 · torch", "NVTX · thread 777 · nccl"}
    assert on[("step", 200)] == on[("gemm", 250)] == "NVTX · thread 4242 · xstage"
    assert on[("gemm", 350)] == on[("step", 500)] == "NVTX · thread 4242 · torch"
    assert on[("step", 100)] == "NVTX · thread 4242" and on[("orphan", 900)] == "NVTX · thread 4242"
    for _, g in nvtx.groupby("track"):  # push/pop ranges of one thread and domain nest: no partial overlap on a track
        a = g[["start_ns", "end_ns"]].to_numpy()
        for s0, e0 in a:
            assert not ((a[:, 0] > s0) & (a[:, 0] < e0) & (a[:, 1] > e0)).any()


def test_dashboard_and_report_name_the_domain(full_run, export, tmp_path):
    from xstage_trace.app.figures import nvtx_labels
    from xstage_trace.reports.content import build_sections

    n = open_run(full_run).nvtx()
    labels = dict(zip(zip(n["name"], n["start_ns"], n["global_tid"]), nvtx_labels(n)))
    assert labels[("step", 200, T1)] == "step (domain xstage)" and labels[("step", 500, T1)] == "step (domain torch)"
    assert labels[("step", 100, T1)] == "step" and labels[("step", 100, T3)] == "step (domain nccl)"
    _kept(export, tmp_path / "r", "step", "xstage")
    lines = [line for sec in build_sections(open_run(tmp_path / "r")) for line in sec.text if "NVTX filter" in str(line)]
    assert lines == ["- NVTX filter: `step` in domain `xstage` kept 4 of 8 kernels"]
