"""Issue 25: every writing command under one output policy (base/output.py), the sandboxed
``collection --sql``, a run folder that is exactly its manifest, validated gate parameters,
bounded decompression and calibration input, and the tracebacks the issue lists, each a one-line
error with exit code 2 that writes and changes nothing.

Each refusal checks the exit code, the one line (the file it names and the fix), and that the
files around it are byte for byte what they were (``snapshot`` before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import CALIB, FUSED, REFERENCE
from test_hostile_input import one_line_error, snapshot, subprocess_cli, xs  # noqa: F401  (xs: the in-process CLI fixture)

TRACED = FUSED / "traced"
FUSED_EXPORT = next(TRACED.glob("*.sqlite.zst"))
LOCAL_DUMPS = sorted(TRACED.glob("fused_local_S1_*.xsp.zst"))
SRC = Path(__file__).resolve().parents[1] / "src"


def _copy_run(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def _rehash(run: Path, rel: str) -> None:
    """Record ``rel``'s current bytes in the manifest (a run that lists a file it holds)."""
    doc = json.loads((run / "manifest.json").read_text())
    doc["files"][rel] = hashlib.sha256((run / rel).read_bytes()).hexdigest()
    (run / "manifest.json").write_text(json.dumps(doc))


@pytest.fixture(scope="module")
def dumps_run(tmp_path_factory) -> Path:
    """The two local-control dumps analyzed alone (no export): a small run on the probes' own clock."""
    out = tmp_path_factory.mktemp("dumps_only") / "local.run"
    r = subprocess_cli("analyze", *LOCAL_DUMPS, "-o", out, "--json")
    assert r.rc == 0, r.err
    return out


# ----------------------------------------------------------------------------- -o never onto an input, never a user's file

@pytest.mark.parametrize("command", ["compare", "export"])
def test_o_onto_the_runs_own_manifest_is_refused(xs, fused_run, tmp_path, command):
    run = _copy_run(fused_run, tmp_path / "r.run")
    before = snapshot(run)
    args = ["compare", run, run, "-o", run / "manifest.json"] if command == "compare" else ["export", run, "-o", run / "manifest.json"]
    line = one_line_error(xs(*args), str(run / "manifest.json"))
    assert "--force" not in line  # -o onto an input: --force would be refused too
    assert snapshot(run) == before


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_export_never_replaces_a_users_file(xs, fused_run, tmp_path, force):
    user = tmp_path / "notes.json"
    user.write_text('{"mine": "39 bytes of the user\'s own data"}')
    before = snapshot(tmp_path)
    one_line_error(xs("export", fused_run, "--format", "chrome", "-o", user, *force), str(user), "name a new file")
    assert snapshot(tmp_path) == before


def test_export_replaces_its_own_earlier_output_only_with_force(xs, fused_run, tmp_path):
    out = tmp_path / "t.json"
    assert xs("export", fused_run, "--format", "chrome", "-o", out).rc == 0
    first = out.read_bytes()
    one_line_error(xs("export", fused_run, "--format", "chrome", "-o", out), str(out), "--force")
    assert out.read_bytes() == first
    assert xs("export", fused_run, "--format", "chrome", "-o", out, "--force").rc == 0
    assert json.loads(out.read_text())["otherData"]["producer"] == "xstage-trace"
    # a Perfetto trace is not a Chrome export: --force does not replace one with the other
    pf = tmp_path / "t.pftrace"
    assert xs("export", fused_run, "-o", pf).rc == 0
    before = snapshot(tmp_path)
    one_line_error(xs("export", fused_run, "--format", "chrome", "-o", pf, "--force"), str(pf))
    assert xs("export", fused_run, "-o", pf, "--force").rc == 0  # the same format: its own output
    one_line_error(xs("export", fused_run, "-o", out, "--force"), str(out))
    assert snapshot(tmp_path).keys() == before.keys()


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_report_never_overwrites_a_users_report_md(xs, fused_run, tmp_path, force):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "report.md").write_text("# my own notes\n")
    before = snapshot(tmp_path)
    one_line_error(xs("report", fused_run, "-o", folder, *force), str(folder), "name a new folder")
    assert snapshot(tmp_path) == before


def test_report_onto_a_file_and_inside_the_run_are_refused(xs, fused_run, tmp_path):
    f = tmp_path / "report"
    f.write_text("a file")
    before, run_before = snapshot(tmp_path), snapshot(fused_run)
    one_line_error(xs("report", fused_run, "-o", f), str(f), "name a new folder")
    one_line_error(xs("report", fused_run, "-o", fused_run / "rep"), str(fused_run / "rep"), "write it outside")
    assert snapshot(tmp_path) == before and snapshot(fused_run) == run_before


def test_report_is_one_folder_replaced_only_when_it_is_an_earlier_report(xs, fused_run, tmp_path):
    dest = tmp_path / "r.report"
    assert xs("report", fused_run, "-o", dest).rc == 0
    assert sorted(p.name for p in dest.iterdir()) == ["figures", "report.html", "report.md"]
    one_line_error(xs("report", fused_run, "-o", dest), str(dest), "--force")
    assert xs("report", fused_run, "-o", dest, "--force").rc == 0
    (dest / "todo.txt").write_text("mine")  # now it holds a user's file: never replaced
    before = snapshot(tmp_path)
    one_line_error(xs("report", fused_run, "-o", dest, "--force"), str(dest))
    assert snapshot(tmp_path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.report"]  # no temporary left beside it


@pytest.mark.parametrize("command", ["compare", "store-wait"])
def test_without_o_nothing_is_written_into_the_current_folder(xs, split_runs, tmp_path, command):
    wave, inter = split_runs
    args = (["compare", wave, inter, "--by", "dest,shape,kernel"] if command == "compare"
            else ["store-wait", wave, "--calibration", CALIB / "calibration_host.json"])
    r = xs(*args, cwd=tmp_path)
    assert r.rc in (0, 1, 2), r.err
    assert list(tmp_path.iterdir()) == []


def test_compare_o_onto_a_users_file_is_refused(xs, split_runs, tmp_path):
    wave, inter = split_runs
    user = tmp_path / "compare.md"
    user.write_text("# my compare notes\n")
    before = snapshot(tmp_path)
    one_line_error(xs("compare", wave, inter, "-o", user, "--force"), str(user))
    assert snapshot(tmp_path) == before


def test_tile_error_o_onto_a_users_file_is_refused(fused_run, tmp_path):
    user = tmp_path / "notes.md"
    user.write_text("mine\n")
    before = snapshot(tmp_path)
    p = subprocess.run([sys.executable, "-m", "xstage_trace", "tile-error", str(fused_run), "-o", str(user), "--force"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1 and str(user) in p.stderr and "Traceback" not in p.stderr
    assert snapshot(tmp_path) == before


def test_calibrate_fit_o_onto_its_input_is_refused(xs, tmp_path):
    pts = tmp_path / "points.csv"
    shutil.copyfile(CALIB / "calibration_points.csv", pts)
    before = snapshot(tmp_path)
    line = one_line_error(xs("calibrate", "fit", pts, "--dest", "host", "-o", pts, "--force"), str(pts), "name a new file")
    assert "also an input" in line
    assert snapshot(tmp_path) == before


def test_an_output_name_over_the_file_name_limit(xs, fused_run, tmp_path):
    out = tmp_path / ("x" * 250 + ".pftrace")
    one_line_error(xs("export", fused_run, "-o", out), "the name is", "shorter")
    assert list(tmp_path.iterdir()) == []


def test_o_onto_an_input_run_does_not_suggest_force(xs, dumps_run):
    before = snapshot(dumps_run)
    for extra in ([], ["--force"]):
        line = one_line_error(xs("analyze", dumps_run, "-o", dumps_run, *extra), str(dumps_run))
        assert "--force" not in line
    assert snapshot(dumps_run) == before


# ----------------------------------------------------------------------------- a full disk, a read-only folder (in a mount namespace)

def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


needs_unshare = pytest.mark.skipif(not _unshare_works(), reason="needs unprivileged mount namespaces (unshare -rm)")


def in_small_disk(folder: Path, size: str, cli_args: list, read_only: bool = False) -> tuple[int, str, list[str]]:
    """Run the CLI with ``folder`` a tmpfs of ``size`` (read-only when asked) in a private mount
    namespace; (exit code, stderr, what ``folder`` holds afterwards, seen from inside)."""
    folder.mkdir(exist_ok=True)
    remount = f"&& mount -o remount,ro {folder} " if read_only else ""
    args = " ".join(f"'{a}'" for a in cli_args)
    script = (f"mount -t tmpfs -o size={size} tmpfs {folder} {remount}|| exit 99; "
              f"{sys.executable} -m xstage_trace {args} >/dev/null 2>{folder}.err; rc=$?; ls -A {folder} > {folder}.ls; exit $rc")
    p = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(SRC), XDG_CACHE_HOME=str(folder.parent / "cache")))
    assert p.returncode != 99, p.stderr
    return p.returncode, Path(f"{folder}.err").read_text(), Path(f"{folder}.ls").read_text().split()


def writing_args(command: str, run: Path, folder: Path) -> list:
    """The command line of ``command`` (analyze, report or export) writing its output into ``folder``."""
    return {"analyze": ["analyze", *LOCAL_DUMPS, "-o", folder / "r.run"],
            "report": ["report", run, "-o", folder / "r.report"],
            "export": ["export", run, "-o", folder / "r.pftrace"]}[command]


@needs_unshare
@pytest.mark.parametrize("command", ["analyze", "report", "export"])
def test_a_full_disk_is_one_line_and_leaves_nothing(fused_run, tmp_path, command):
    disk = tmp_path / "disk"
    rc, err, left = in_small_disk(disk, "256k", writing_args(command, fused_run, disk))
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "disk is full" in err and "Traceback" not in err, err
    assert left == []


@needs_unshare
@pytest.mark.parametrize("command", ["report", "export", "analyze"])
def test_a_read_only_folder_is_one_line(fused_run, tmp_path, command):
    disk = tmp_path / "ro"
    rc, err, left = in_small_disk(disk, "1m", writing_args(command, fused_run, disk), read_only=True)
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and str(disk) in err and "Traceback" not in err, err
    assert left == []


# ----------------------------------------------------------------------------- collection --sql

@pytest.mark.parametrize("sql", [
    "COPY (SELECT 1) TO '{victim}'",
    "ATTACH '{db}' AS x",
    "SELECT 1; SELECT 2",
    "CREATE TABLE t AS SELECT 1",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "PRAGMA version",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('{victim}')",
    "SELECT * FROM read_parquet('{outside}')",
    "SELECT * FROM glob('/etc/*')",
])
def test_collection_sql_is_one_select_over_the_run_tables(xs, dumps_run, tmp_path, sql):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"x": [1]}), outside)
    before, run_before = snapshot(tmp_path), snapshot(dumps_run)
    r = xs("collection", dumps_run, "--query", "sql", "--sql", sql.format(victim=victim, db=tmp_path / "x.db", outside=outside), cwd=tmp_path)
    line = one_line_error(r)
    assert "re-run xstage-trace analyze" not in line
    assert "SELECT" in line or "views" in line  # says what is allowed
    assert snapshot(tmp_path) == before and snapshot(dumps_run) == run_before


def test_collection_sql_still_answers_a_select(xs, dumps_run):
    r = xs("collection", dumps_run, "--query", "sql", "--sql", "SELECT count(*) AS n FROM tiles", "--json")
    assert r.rc == 0, r.err
    import xstage_trace

    assert r.json()["rows"] == [{"n": len(xstage_trace.open_run(dumps_run).tiles())}]


def test_collection_sql_error_hint_is_about_the_sql(xs, dumps_run):
    line = one_line_error(xs("collection", dumps_run, "--query", "sql", "--sql", "SELECT nope FROM tiles"), "nope", "check the SQL")
    assert "re-run" not in line


# ----------------------------------------------------------------------------- a run folder is exactly its manifest

def test_an_unlisted_table_file_is_an_error_never_read(xs, dumps_run, tmp_path):
    run = _copy_run(dumps_run, tmp_path / "r.run")
    part = next((run / "tiles").rglob("*.parquet"))
    extra = part.with_name("part-99999.parquet")
    shutil.copyfile(part, extra)  # a valid table file the manifest does not list
    import xstage_trace
    from xstage_trace.base.errors import InputError

    with pytest.raises(InputError, match="does not list it"):
        xstage_trace.open_run(run)
    before = snapshot(tmp_path)
    one_line_error(xs("export", run, "-o", tmp_path / "t.pftrace"), str(extra), "move it out")
    one_line_error(xs("analyze", run, "-o", tmp_path / "again.run"), str(extra), "move it out")
    assert snapshot(tmp_path) == before


def test_a_run_table_that_is_a_folder(xs, dumps_run, tmp_path):
    run = _copy_run(dumps_run, tmp_path / "r.run")
    (run / "dumps.parquet").unlink()
    (run / "dumps.parquet").mkdir()
    one_line_error(xs("export", run, "-o", tmp_path / "t.pftrace"), str(run / "dumps.parquet"))
    assert not (tmp_path / "t.pftrace").exists()


@pytest.mark.parametrize("field, value", [("alignment", "garbage"), ("alignment", {"rank0": 3}), ("gpus", "H200"),
                                          ("warnings", [1, 2]), ("inputs", ["x"]), ("tables", {"probes": -1}),
                                          ("calibration", 5), ("files", {"a": 1})])
def test_garbage_in_a_manifest_field(xs, dumps_run, tmp_path, field, value):
    run = _copy_run(dumps_run, tmp_path / "r.run")
    doc = json.loads((run / "manifest.json").read_text())
    doc[field] = value
    (run / "manifest.json").write_text(json.dumps(doc))
    one_line_error(xs("export", run, "-o", tmp_path / "t.pftrace"), ("manifest.json", field))
    assert not (tmp_path / "t.pftrace").exists()


def test_reanalysing_a_dumps_only_run_keeps_its_time_base(xs, dumps_run, tmp_path):
    r = xs("analyze", dumps_run, "-o", tmp_path / "again.run", "--json")
    assert r.rc == 0, r.err
    base = json.loads((dumps_run / "manifest.json").read_text())["time_base"]
    assert "nsys" not in base.split("(")[0] and r.json()["time_base"] == base


def test_the_runs_calibration_copy_is_checked_like_a_users_file(fused_run, tmp_path):
    import xstage_trace
    from xstage_trace.base.errors import InputError
    from xstage_trace.collectors.calibration_io import read_document

    run = xstage_trace.open_run(fused_run)
    manifest = json.loads((fused_run / "manifest.json").read_text())
    assert manifest["files"]["calibration.json"] == hashlib.sha256((CALIB / "calibration_host.json").read_bytes()).hexdigest()
    assert run.calibration_document() == read_document(CALIB / "calibration_host.json")
    copy = _copy_run(fused_run, tmp_path / "r.run")
    (copy / "calibration.json").write_text('{"rate_gbps": NaN}')
    with pytest.raises(InputError, match="sha256"):
        xstage_trace.open_run(copy).calibration_document()
    _rehash(copy, "calibration.json")  # listed and hashed, but not a calibration: the user file's checks
    with pytest.raises(InputError, match="calibration"):
        xstage_trace.open_run(copy).calibration_document()


# ----------------------------------------------------------------------------- gate parameters, filters

@pytest.mark.parametrize("args", [["--gate", "inf"], ["--gate", "nan"], ["--gate", "-1"], ["--gate", "1e9"],
                                  ["--accept", "   "], ["--accept", ""], ["--accept", "two\nlines"]])
def test_gate_parameters_are_validated(xs, split_runs, tmp_path, args):
    wave, inter = split_runs
    r = xs("compare", inter, wave, "--by", "dest,shape,kernel", *args, "-o", tmp_path / "c.md")
    one_line_error(r, args[0])
    assert list(tmp_path.iterdir()) == []


def test_export_dump_glob_matching_nothing_names_the_dumps(xs, fused_run, tmp_path):
    line = one_line_error(xs("export", fused_run, "--dump", "*no_such_dump*", "-o", tmp_path / "t.pftrace"), "*no_such_dump*")
    assert "fused_host_S1_interleaved" in line
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- tracebacks the issue lists

def test_dashboard_port_out_of_range(xs, dumps_run):
    one_line_error(xs("dashboard", dumps_run, "--port", "-1"), "--port", "between 1 and 65535")


def test_dashboard_port_in_use(xs, dumps_run):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        s.listen()
        port = s.getsockname()[1]
        one_line_error(xs("dashboard", dumps_run, "--port", port), f"--port {port}", "another --port")


def test_a_zero_slice_dump_beside_an_export(xs, tmp_path):
    from xstage_trace.base.probe_layout import RECORD_DTYPE, SLICE_DTYPE
    from xstage_trace.instrument.probe_writer import write_probe_dump

    dump = tmp_path / "empty.xsp"
    write_probe_dump(dump, slice_meta=np.zeros(0, SLICE_DTYPE), records=np.zeros(0, RECORD_DTYPE), capacity=4,
                     event_names=["mainloop"], gpu_name="NVIDIA H200", sm_count=132, sm_clock_khz=1_980_000)
    before = snapshot(tmp_path)
    one_line_error(xs("analyze", dump, FUSED_EXPORT, "-o", tmp_path / "r.run"), str(dump), "leave this dump out")
    assert snapshot(tmp_path) == before


def test_text_in_model_stall_tiles(xs, tmp_path):
    t = tmp_path / "tiles.csv"
    t.write_text("span_us,cover_us\n1.5,0.5\nabc,0.2\n")
    one_line_error(xs("model", "stall", "--tiles", t), (str(t), "span_us", "'abc'"))


# ----------------------------------------------------------------------------- bounded decompression and input

def _zstd(data_parts, path: Path) -> Path:
    with pa.output_stream(str(path), compression="zstd") as fh:
        for part in data_parts:
            fh.write(part)
    return path


def _small_dump_bytes() -> bytes:
    with pa.input_stream(str(LOCAL_DUMPS[0]), compression="zstd") as fh:
        return fh.read()


def _memory_cap(limit_bytes: int):
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def test_an_xsp_zst_bomb_is_refused_in_bounded_memory(tmp_path):
    data = _small_dump_bytes()
    zeros = bytes(1 << 24)
    bomb = _zstd([data] + [zeros] * 64, tmp_path / "bomb.xsp.zst")  # 1 GiB of zeros after a valid dump
    assert bomb.stat().st_size < 2 << 20
    r = subprocess_cli("analyze", bomb, "-o", tmp_path / "r.run", preexec_fn=_memory_cap(3 << 30),
                       env=dict(os.environ, PYTHONPATH=str(SRC)))
    one_line_error(r, str(bomb), "fresh dump")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.xsp.zst"]


def test_an_xsp_zst_whose_header_declares_8_gib_is_refused_before_decompressing(tmp_path):
    from test_hostile_input import set_header

    from xstage_trace.base.probe_layout import HEADER_DTYPE, SLICE_DTYPE

    data = bytearray(_small_dump_bytes())
    h = np.frombuffer(bytes(data[: HEADER_DTYPE.itemsize]), HEADER_DTYPE)[0]
    data = bytearray(set_header(bytes(data), "capacity", 1 << 30))
    off = int(h["header_bytes"]) - SLICE_DTYPE.itemsize * int(h["num_slices"])
    sl = np.frombuffer(bytes(data[off: int(h["header_bytes"])]), SLICE_DTYPE).copy()
    sl["count"] = (8 << 30) // 16 // len(sl)
    data[off: int(h["header_bytes"])] = sl.tobytes()
    bomb = _zstd([bytes(data)] + [bytes(1 << 24)] * 16, tmp_path / "declared.xsp.zst")
    r = subprocess_cli("analyze", bomb, "-o", tmp_path / "r.run", preexec_fn=_memory_cap(3 << 30), env=dict(os.environ, PYTHONPATH=str(SRC)))
    one_line_error(r, (str(bomb), "records"), "XSTAGE_MAX_DUMP_RECORDS")


def test_a_sqlite_zst_over_the_cache_cap_leaves_nothing_in_the_cache(tmp_path):
    cache = tmp_path / "cache"
    export = tmp_path / "e.sqlite.zst"
    shutil.copyfile(REFERENCE / "h200_burst_gap_quick.nsys-rep.611f0b197688689f.sqlite.zst", export)
    env = dict(os.environ, PYTHONPATH=str(SRC), XDG_CACHE_HOME=str(cache), XSTAGE_MAX_EXPORT_BYTES=str(1 << 20))
    r = subprocess_cli("analyze", export, "-o", tmp_path / "r.run", env=env)
    one_line_error(r, (str(export), "XSTAGE_MAX_EXPORT_BYTES"), "pass the .sqlite")
    assert not (tmp_path / "r.run").exists()
    assert [p for p in cache.rglob("*") if p.is_file()] == []
    # a frame that declares no size is cut off as it streams: the same refusal, nothing kept
    with pa.input_stream(str(export), compression="zstd") as fh:
        raw = fh.read()
    streamed = _zstd([raw[i: i + 65536] for i in range(0, len(raw), 65536)], tmp_path / "s.sqlite.zst")
    from xstage_trace.collectors.compressed import zstd_content_size

    assert zstd_content_size(streamed) is None and zstd_content_size(export) == len(raw)
    one_line_error(subprocess_cli("analyze", streamed, "-o", tmp_path / "r.run", env=env), str(streamed))
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_calibrate_fit_refuses_more_points_than_one_fit_takes_before_fitting(xs, tmp_path, monkeypatch):
    pts = pd.read_csv(CALIB / "calibration_points.csv")
    host = int((pts["dest"] == "host").sum())
    monkeypatch.setenv("XSTAGE_MAX_CALIBRATION_POINTS", str(host - 1))
    f = tmp_path / "p.csv"
    pts.to_csv(f, index=False)
    one_line_error(xs("calibrate", "fit", f, "--dest", "host", "-o", tmp_path / "c.json"), (str(f), f"{host} calibration points"),
                   "XSTAGE_MAX_CALIBRATION_POINTS")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv"]
    monkeypatch.setenv("XSTAGE_MAX_CALIBRATION_POINTS", "1")  # a file may then hold 1 × FILE_ROWS_PER_FIT_POINT (1024) rows
    big = tmp_path / "big.csv"
    pd.concat([pts] * 4, ignore_index=True).to_csv(big, index=False)  # 1184 rows: refused from its size, before parsing
    one_line_error(xs("calibrate", "fit", big, "--dest", "host"), (str(big), "rows"))


def test_calibrate_fit_reads_only_the_columns_it_uses(tmp_path):
    from xstage_trace.pipeline.runner import load_measurements

    pts = pd.read_csv(CALIB / "calibration_points.csv").assign(junk=["x" * 1000] * 296, more_junk="not a number")
    f = tmp_path / "p.csv"
    pts.to_csv(f, index=False)
    got = load_measurements(f)
    assert "junk" not in got and "more_junk" not in got
    assert str(got["dest"].dtype) == "category" and len(got) == len(pts)


# ----------------------------------------------------------------------------- pairing: any subset of a capture's dumps

@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    """The fused sample's export and its eight dumps' headers."""
    os.environ.setdefault("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    from xstage_trace.collectors.compressed import decompressed_export
    from xstage_trace.collectors.nsys_reader import read_nsys_export
    from xstage_trace.collectors.probe_format import decode_probe_dump

    exp = read_nsys_export(decompressed_export(FUSED_EXPORT))
    dumps = [decode_probe_dump(p, records=False) for p in sorted(TRACED.glob("*.xsp.zst"))]
    return exp, dumps


def _inside_their_kernels(exp, dumps, pairing) -> bool:
    """Every dump's span, mapped by the pairing's clock line, inside the kernel it was given (± 1 µs)."""
    k = exp.kernels.to_pandas()
    for j, i in enumerate(pairing.dump_indices):
        a, b = (np.array(dumps[i].span_gt_ns, dtype=np.int64) - np.int64(exp.utc_epoch_ns)).astype(float)
        lo, hi = pairing.alignment.to_kernel_clock(np.array([a, b]))
        row = k.iloc[int(pairing.alignment.kernel_of_dump[j])]
        if not (lo >= row["start_ns"] - 1000 and hi <= row["end_ns"] + 1000):
            return False
    return True


def test_every_pair_of_the_captures_dumps_pairs_with_its_export(capture):
    from itertools import combinations

    from xstage_trace.collectors.pairing import pair_dumps

    exp, dumps = capture
    full = pair_dumps([exp], dumps)[0]
    assert _inside_their_kernels(exp, dumps, full)
    kernel = dict(zip(full.dump_indices, full.alignment.kernel_of_dump.tolist()))
    for sub in [*combinations(range(len(dumps)), 2), (0,), (7,), (1, 3, 6)]:
        p = pair_dumps([exp], [dumps[i] for i in sub])[0]
        assert _inside_their_kernels(exp, [dumps[i] for i in sub], p), sub
        assert [kernel[sub[j]] for j in range(len(sub))] == p.alignment.kernel_of_dump.tolist(), sub


def test_the_two_local_control_dumps_alone_pair_with_the_export(xs, tmp_path):
    r = xs("analyze", *LOCAL_DUMPS, FUSED_EXPORT, "-o", tmp_path / "r.run", "--json")
    assert r.rc == 0, r.err
    a = r.json()["alignment"]["rank0"]
    assert a["dumps_matched"] == 2 and a["residual_ns"] == 0


def test_clock_resolution_is_read_from_the_readings():
    from xstage_trace.collectors.pairing import clock_resolution_ns

    assert clock_resolution_ns(np.array([32 * 7, 32 * 1001, 32 * 5])) == 32
    assert clock_resolution_ns(np.array([3, 1000])) == 1
    assert clock_resolution_ns(np.array([1 << 40, 1 << 41])) == 512  # capped at MAX_RESOLUTION_NS (1 µs)


# ----------------------------------------------------------------------------- the run write as a transaction (issue 29)

def test_staged_run_publishes_only_on_commit(tmp_path):
    from xstage_trace.base.schema import TABLES, empty_table
    from xstage_trace.base.run_files import read_run
    from xstage_trace.dataset.run_folder import staged_run

    with pytest.raises(RuntimeError, match="commit"):
        with staged_run(tmp_path / "a.run") as stage:
            stage.write_table("kernels", empty_table("kernels"))
    with pytest.raises(KeyError):
        with staged_run(tmp_path / "b.run") as stage:
            stage.write_table("kernels", empty_table("kernels"))
            raise KeyError("the pipeline failed")
    assert list(tmp_path.iterdir()) == []  # neither the runs nor their temporaries
    with staged_run(tmp_path / "c.run") as stage:
        stage.write_text("calibration_points.csv", "dest,mode\n")
        counts = stage.commit({"note": "hand-made"})
        assert not (tmp_path / "c.run").exists()  # published when the block ends
    tables, manifest = read_run(tmp_path / "c.run")
    assert counts == {n: 0 for n in TABLES} and set(tables) == set(TABLES) and manifest["note"] == "hand-made"
    assert "calibration_points.csv" in manifest["files"]
