"""Hostile and malformed input, run through the real CLI (issue 14).

The promise under test (README): bad input gets exactly one line on stderr naming the file and the
fix, exit code 2, no traceback, nothing written, and no file of the user's touched or lost. Most
cases call ``xstage_trace.cli.main`` in this process (argv patched, SystemExit caught) to stay
fast; the cases about blocking reads and signals run it in a subprocess with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import CALIB, REFERENCE, SAMPLES, reference_sqlite, run_sql
from xstage_trace import open_run
from xstage_trace.base import atomic
from xstage_trace.base.errors import InputError
from xstage_trace.cli import main
from xstage_trace.base.probe_layout import HEADER_DTYPE, SLICE_DTYPE

REFERENCE_KERNELS = 17  # PROVENANCE.md of h200_burst_gap_reference: 17 kernels, 16 NVTX ranges
REFERENCE_NVTX = 16


# ----------------------------------------------------------------------------- helpers

@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out, parse_constant=_no_constant)


def _no_constant(token):
    raise AssertionError(f"non-strict JSON token {token}")


@pytest.fixture
def xs(capsys, monkeypatch):
    """Run ``xstage-trace ARGS`` through cli.main in this process."""

    def run(*args, cwd: Path | None = None) -> Result:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", ["xstage-trace", *[str(a) for a in args]])
        old = signal.getsignal(signal.SIGTERM)
        capsys.readouterr()
        try:
            main()
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            signal.signal(signal.SIGTERM, old)
        cap = capsys.readouterr()
        return Result(rc, cap.out, cap.err)

    return run


def subprocess_cli(*args, cwd=None, env=None, timeout=120, preexec_fn=None) -> Result:
    p = subprocess.run([sys.executable, "-m", "xstage_trace", *[str(a) for a in args]], capture_output=True, text=True,
                       cwd=cwd, env=env, timeout=timeout, preexec_fn=preexec_fn)
    return Result(p.returncode, p.stdout, p.stderr)


def one_line_error(r: Result, names: str | tuple[str, ...] = (), fix: str | None = None) -> str:
    """The promise: exit 2, one line on stderr naming the file (and the fix), no traceback, no stdout."""
    assert r.rc == 2, (r.rc, r.out, r.err)
    lines = r.err.splitlines()
    assert len(lines) == 1 and r.err.endswith("\n"), r.err
    line = lines[0]
    assert line.startswith("xstage-trace: error: "), line
    assert "Traceback" not in r.err and "╭" not in r.err
    assert r.out == ""
    for name in (names,) if isinstance(names, str) else names:
        assert name in line, (name, line)
    if fix is not None:
        assert fix in line, (fix, line)
    return line


def snapshot(folder: Path) -> dict:
    """Every file under ``folder`` with its bytes' hash and mode (to prove nothing was touched)."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        st = os.lstat(p)
        out[str(p.relative_to(folder))] = (stat.S_IMODE(st.st_mode), hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None)
    return out


def sample_dump_bytes() -> bytes:
    """A real H200 probe dump (the sample may be stored zstd-compressed)."""
    p = next((CALIB / "quick").glob("host_periodic_K132_B8192_G0.xsp*"))
    if p.suffix != ".zst":
        return p.read_bytes()
    import pyarrow as pa  # the zstd frame decompressed by Arrow's codec, not by the decoder under test

    with pa.input_stream(str(p), compression="zstd") as fh:
        return fh.read()


def dump_records(data: bytes) -> int:
    """Records in a dump, from its size and header (docs/probe-format.md), independent of the decoder."""
    h = np.frombuffer(data[: HEADER_DTYPE.itemsize], HEADER_DTYPE)[0]
    return (len(data) - int(h["header_bytes"])) // 16


def write_dump(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def set_header(data: bytes, field: str, value: int) -> bytes:
    buf = bytearray(data)
    dt, off = HEADER_DTYPE.fields[field][:2]
    buf[off: off + dt.itemsize] = np.array(value, dt).tobytes()
    return bytes(buf)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory) -> Path:
    """One run folder from the reference export, analyzed once."""
    out = tmp_path_factory.mktemp("ref") / "ref.xstage-run"
    r = subprocess_cli("analyze", reference_sqlite(), "-o", out, "--json")
    assert r.rc == 0, r.err
    return out


@pytest.fixture
def sqlite_copy(tmp_path):
    def make(name: str = "export.sqlite", *sql: str) -> Path:
        if any("DROP COLUMN" in q for q in sql) and sqlite3.sqlite_version_info < (3, 35):
            pytest.skip(f"SQLite {sqlite3.sqlite_version} has no ALTER TABLE DROP COLUMN")
        dst = tmp_path / name
        shutil.copyfile(reference_sqlite(), dst)
        return run_sql(dst, *sql) if sql else dst

    return make


# ----------------------------------------------------------------------------- output paths

@pytest.mark.parametrize("force", [False, True])
def test_o_onto_a_users_file_never_replaces_it(xs, tmp_path, force):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    before = snapshot(tmp_path)
    one_line_error(xs("analyze", reference_sqlite(), "-o", notes, *(["--force"] if force else [])), "notes.txt", "name a new folder")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("force", [False, True])
def test_o_onto_a_folder_of_user_files_never_replaces_it(xs, tmp_path, force):
    mine = tmp_path / "thesis"
    (mine / "ch1").mkdir(parents=True)
    (mine / "ch1" / "intro.tex").write_text("\\section{Intro}")
    (mine / "data.csv").write_text("a,b\n1,2\n")
    before = snapshot(tmp_path)
    one_line_error(xs("analyze", reference_sqlite(), "-o", mine, *(["--force"] if force else [])), "thesis", "not an xstage-trace run folder")
    assert snapshot(tmp_path) == before


def test_o_onto_an_empty_folder_is_refused(xs, tmp_path):
    (tmp_path / "empty").mkdir()
    one_line_error(xs("analyze", reference_sqlite(), "-o", tmp_path / "empty", "--force"), "empty")
    assert list((tmp_path / "empty").iterdir()) == []


def test_o_onto_the_input_folder_keeps_the_dumps(xs, tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write_dump(dumps / "a.xsp", sample_dump_bytes())
    before = snapshot(tmp_path)
    one_line_error(xs("analyze", dumps, "-o", dumps, "--force"), "dumps")
    assert snapshot(tmp_path) == before


def test_o_onto_the_input_file_keeps_it(xs, sqlite_copy, tmp_path):
    src = sqlite_copy()
    before = snapshot(tmp_path)
    one_line_error(xs("analyze", src, "-o", src, "--force"), src.name)
    assert snapshot(tmp_path) == before


def test_o_inside_an_input_folder_is_refused(xs, tmp_path):
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    write_dump(dumps / "a.xsp", sample_dump_bytes())
    one_line_error(xs("analyze", dumps, "-o", dumps / "run"), "dumps", "outside the input folders")
    assert sorted(p.name for p in dumps.iterdir()) == ["a.xsp"]


def test_a_run_folder_that_holds_an_input(tmp_path):
    """check_output_against_inputs on its own: replacing the folder would delete the input."""
    from xstage_trace.dataset.run_folder import check_output_against_inputs

    with pytest.raises(InputError, match="holds the input"):
        check_output_against_inputs(tmp_path / "run", [tmp_path / "run" / "sub" / "export.sqlite"])


def test_force_onto_a_run_that_holds_an_input_keeps_the_input(xs, reference_run, tmp_path):
    run = tmp_path / "old.xstage-run"
    shutil.copytree(reference_run, run)
    shutil.copyfile(reference_sqlite(), run / "export.sqlite")  # the user keeps an input inside it
    before = snapshot(run)
    one_line_error(xs("analyze", run / "export.sqlite", "-o", run, "--force"), "old.xstage-run", "replacing it would delete that input")
    assert snapshot(run) == before


@pytest.mark.parametrize("target", [".", "..", "CWD"])
def test_o_current_folder_or_above_is_refused(xs, tmp_path, target):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("x")
    before = snapshot(tmp_path)
    arg = str(work) if target == "CWD" else target
    one_line_error(xs("analyze", reference_sqlite(), "-o", arg, "--force", cwd=work), fix="name a new folder")
    assert snapshot(tmp_path) == before


def test_o_through_a_symlink_is_refused(xs, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere" / "new")
    one_line_error(xs("analyze", reference_sqlite(), "-o", tmp_path / "link"), "link", "symbolic link")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_o_below_a_file_is_refused(xs, tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    one_line_error(xs("analyze", reference_sqlite(), "-o", tmp_path / "notes.txt" / "run"), "notes.txt", "not a folder")
    assert (tmp_path / "notes.txt").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_o_in_a_read_only_folder_is_refused(xs, tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        one_line_error(xs("analyze", reference_sqlite(), "-o", tmp_path / "ro" / "run"), "ro", "not writable")
    finally:
        (tmp_path / "ro").chmod(0o755)


def test_an_earlier_run_is_kept_without_force(xs, reference_run, tmp_path):
    run = tmp_path / "r.xstage-run"
    shutil.copytree(reference_run, run)
    before = snapshot(run)
    one_line_error(xs("analyze", reference_sqlite(), "-o", run), "r.xstage-run", "--force")
    assert snapshot(run) == before


def test_force_replaces_an_earlier_run_in_one_step(xs, reference_run, tmp_path):
    run = tmp_path / "r.xstage-run"
    shutil.copytree(reference_run, run)
    old_kernels = pq.read_table(run / "kernels.parquet").num_rows
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    data = sample_dump_bytes()
    write_dump(dumps / "a.xsp", data)
    r = xs("analyze", dumps, "-o", run, "--force", "--json")
    assert r.rc == 0, r.err
    assert r.json()["probes"] == dump_records(data) and r.json()["kernels"] == 0
    assert old_kernels == REFERENCE_KERNELS and pq.read_table(run / "kernels.parquet").num_rows == 0  # the new run, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dumps", "r.xstage-run"]  # no temporaries left


@pytest.mark.parametrize("extra", ["notes.md", "figures/plot.png", "kernels/rank=0/mine.txt"])
def test_force_never_deletes_a_users_file_inside_an_earlier_run(xs, reference_run, tmp_path, extra):
    run = tmp_path / "r.xstage-run"
    shutil.copytree(reference_run, run)
    (run / extra).parent.mkdir(parents=True, exist_ok=True)
    (run / extra).write_text("mine")
    before = snapshot(run)
    one_line_error(xs("analyze", reference_sqlite(), "-o", run, "--force"), "r.xstage-run", "move them out")
    assert snapshot(run) == before


def test_force_never_deletes_the_calibration_it_reads(xs, reference_run, tmp_path):
    run = tmp_path / "r.xstage-run"
    shutil.copytree(reference_run, run)
    shutil.copyfile(CALIB / "calibration_host.json", tmp_path / "calib.json")
    one_line_error(xs("analyze", reference_sqlite(), "-o", tmp_path / "calib.json", "--force"), "calib.json")
    (run / "calib.json").write_bytes((tmp_path / "calib.json").read_bytes())
    one_line_error(xs("analyze", reference_sqlite(), "--calibration", run / "calib.json", "-o", run, "--force"), "r.xstage-run")
    assert (run / "calib.json").is_file()


@pytest.mark.parametrize("manifest", ['{"tool": "something-else", "schema_version": 1}', "{not json", "[1, 2]", ""])
def test_force_never_replaces_a_folder_with_a_foreign_or_broken_manifest(xs, tmp_path, manifest):
    d = tmp_path / "web"
    d.mkdir()
    (d / "manifest.json").write_text(manifest)
    (d / "index.html").write_text("<html/>")
    before = snapshot(tmp_path)
    one_line_error(xs("analyze", reference_sqlite(), "-o", d, "--force"), "web")
    assert snapshot(tmp_path) == before


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_temporaries_of_a_killed_run_are_removed(xs, tmp_path):
    stale = tmp_path / f".run.{_dead_pid()}.abcd1234.tmp"
    (stale / "kernels.parquet").parent.mkdir(parents=True)
    (stale / "kernels.parquet").write_bytes(b"half written")
    r = xs("analyze", reference_sqlite(), "-o", tmp_path / "run")
    assert r.rc == 0, r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_temporaries_of_a_live_writer_are_left_alone(xs, tmp_path):
    live = tmp_path / f".run.{os.getppid()}.abcd1234.tmp"  # pytest's parent: alive for the whole test
    live.mkdir()
    r = xs("analyze", reference_sqlite(), "-o", tmp_path / "run")
    assert r.rc == 0, r.err
    assert live.is_dir()


def test_sigterm_while_writing_leaves_nothing(tmp_path):
    """SIGTERM arrives while the tables are written (the writer signals itself on its first table)."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        import pyarrow.parquet as pq
        import xstage_trace.dataset.run_folder as ds
        real = pq.write_table
        def write_then_term(*a, **k):
            real(*a, **k)
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()
        ds.pq.write_table = write_then_term
        sys.argv = ["xstage-trace", "analyze", {str(reference_sqlite())!r}, "-o", {str(tmp_path / "run")!r}]
        from xstage_trace.cli import main
        main()
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, p.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_output_honours_the_umask(xs, tmp_path, umask):
    old = os.umask(umask)
    try:
        r = xs("analyze", reference_sqlite(), "-o", tmp_path / "run")
    finally:
        os.umask(old)
    assert r.rc == 0, r.err
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((tmp_path / "run" / "manifest.json").stat().st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "fallback"])
def test_atomic_dir_replaces_only_what_the_check_allows(tmp_path, monkeypatch, renameat2):
    if renameat2 and atomic._RENAMEAT2 is None:
        pytest.skip("no renameat2 in this libc")
    if not renameat2:
        monkeypatch.setattr(atomic, "_RENAMEAT2", None)
    final = tmp_path / "out"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with atomic.atomic_dir(final, replaceable=lambda p: (p / "old.txt").is_file()) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(FileExistsError):
        with atomic.atomic_dir(final, replaceable=lambda p: False) as tmp:
            (tmp / "newer.txt").write_text("newer")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    with pytest.raises(FileExistsError):
        with atomic.atomic_dir(final) as tmp:  # no replaceable: never replaces
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_calibrate_fit_o_never_replaces_a_users_file(xs, tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    one_line_error(xs("calibrate", "fit", REFERENCE / "h200_burst_gap_sweep.csv", "--dest", "host", "-o", notes, "--force"), "notes.json")
    assert notes.read_text() == '{"mine": true}'
    one_line_error(xs("calibrate", "fit", REFERENCE / "h200_burst_gap_sweep.csv", "--dest", "host", "-o", tmp_path), fix="name a new file")


def test_calibrate_fit_replaces_an_earlier_calibration_only_with_force(xs, tmp_path):
    out = tmp_path / "calib.json"
    csv = REFERENCE / "h200_burst_gap_sweep.csv"
    assert xs("calibrate", "fit", csv, "--dest", "local", "-o", out).rc == 0
    local = json.loads(out.read_text())
    one_line_error(xs("calibrate", "fit", csv, "--dest", "host", "-o", out), "calib.json", "--force")
    assert json.loads(out.read_text()) == local
    assert xs("calibrate", "fit", csv, "--dest", "host", "-o", out, "--force").rc == 0
    assert json.loads(out.read_text())["store_path"] == "host"


# ----------------------------------------------------------------------------- duplicated inputs

def _dumps_folder(tmp_path: Path) -> tuple[Path, bytes]:
    d = tmp_path / "dumps"
    d.mkdir()
    data = sample_dump_bytes()
    write_dump(d / "a.xsp", data)
    return d, data


@pytest.mark.parametrize("case", ["same path twice", "copy under another name", "folder and a file inside it", "folder twice"])
def test_a_dump_given_twice_is_read_once(xs, tmp_path, case):
    d, data = _dumps_folder(tmp_path)
    args = {"same path twice": [d / "a.xsp", d / "a.xsp"],
            "copy under another name": [d / "a.xsp", write_dump(tmp_path / "b.xsp", data)],
            "folder and a file inside it": [d, d / "a.xsp"],
            "folder twice": [d, d]}[case]
    r = xs("analyze", *args, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    doc = r.json()
    assert doc["probes"] == dump_records(data)
    assert any("same content as" in w for w in doc["warnings"])
    assert "same content as" in r.err or r.err == ""  # --json prints warnings in the JSON only


@pytest.mark.parametrize("case", ["same path twice", "copy under another name"])
def test_an_export_given_twice_is_one_gpu(xs, sqlite_copy, tmp_path, case):
    src = reference_sqlite()
    other = src if case == "same path twice" else sqlite_copy("again.sqlite")
    r = xs("analyze", src, other, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    doc = r.json()
    assert doc["kernels"] == REFERENCE_KERNELS and doc["nvtx_ranges"] == REFERENCE_NVTX
    assert doc["gpus"] == ["NVIDIA H200"]


def test_a_report_and_its_own_export_are_refused(xs, tmp_path):
    rep = REFERENCE / "h200_burst_gap_quick.nsys-rep"
    exported = tmp_path / "by_hand.sqlite"
    shutil.copyfile(reference_sqlite(), exported)
    run_sql(exported, "CREATE TABLE user_note (x)")  # a different file, the same capture
    one_line_error(xs("analyze", rep, exported, "-o", tmp_path / "run"), "by_hand.sqlite", "not both")
    assert not (tmp_path / "run").exists()


def test_a_run_folder_and_the_dump_it_was_made_from(xs, tmp_path):
    d, data = _dumps_folder(tmp_path)
    assert xs("analyze", d, "-o", tmp_path / "first").rc == 0
    r = xs("analyze", tmp_path / "first", d / "a.xsp", "-o", tmp_path / "second", "--json")
    assert r.rc == 0, r.err
    assert r.json()["probes"] == dump_records(data)
    assert any("same content as run folder" in w for w in r.json()["warnings"])


def test_a_run_folder_given_twice_is_read_once(xs, reference_run, tmp_path):
    r = xs("analyze", reference_run, reference_run, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert r.json()["kernels"] == REFERENCE_KERNELS


# ----------------------------------------------------------------------------- probe headers

@pytest.mark.parametrize("khz", [0, 1, 50_000, 50_000_000, 2**32 - 1])
def test_implausible_sm_clock_in_the_header(xs, tmp_path, khz):
    bad = write_dump(tmp_path / "clock.xsp", set_header(sample_dump_bytes(), "sm_clock_khz", khz))
    one_line_error(xs("analyze", bad, "-o", tmp_path / "run"), "clock.xsp", "re-run")
    assert not (tmp_path / "run").exists()


def test_anchors_implying_an_absurd_clock_fall_back_to_the_nominal_clock(xs, tmp_path):
    data = bytearray(sample_dump_bytes())
    h = np.frombuffer(bytes(data[: HEADER_DTYPE.itemsize]), HEADER_DTYPE)[0]
    off = HEADER_DTYPE.itemsize + 32 * int(h["num_events"])  # slice 0
    s = np.frombuffer(bytes(data[off: off + SLICE_DTYPE.itemsize]), SLICE_DTYPE).copy()
    s["clk_close"] = s["clk_open"] + 1  # one cycle over the whole slice: a 10^5 GHz clock
    data[off: off + SLICE_DTYPE.itemsize] = s.tobytes()
    bad = write_dump(tmp_path / "anchors.xsp", bytes(data))
    r = xs("analyze", bad, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert any("nominal SM clock" in w for w in r.json()["warnings"])
    npc = open_run(tmp_path / "run").probe_slices()["ns_per_cycle"].to_numpy()
    assert npc[0] == pytest.approx(1e6 / int(h["sm_clock_khz"]))
    assert np.all(np.isfinite(npc))


def _sparse_dump(path: Path, records: int) -> Path:
    """A header-consistent dump of one slice claiming ``records`` records; the body is a hole."""
    data = sample_dump_bytes()
    h = np.frombuffer(data[: HEADER_DTYPE.itemsize], HEADER_DTYPE)[0].copy()
    n_ev = int(h["num_events"])
    names = data[HEADER_DTYPE.itemsize: HEADER_DTYPE.itemsize + 32 * n_ev]
    h["num_slices"], h["capacity"] = 1, records
    h["header_bytes"] = HEADER_DTYPE.itemsize + 32 * n_ev + SLICE_DTYPE.itemsize
    s = np.zeros(1, SLICE_DTYPE)
    s["count"], s["closed"] = records, 1
    with open(path, "wb") as fh:
        fh.write(h.tobytes() + names + s.tobytes())
        fh.truncate(int(h["header_bytes"]) + 16 * records)
    return path


def test_a_huge_dump_is_refused_from_its_header(xs, tmp_path):
    bad = _sparse_dump(tmp_path / "huge.xsp", 1 << 26)  # 1 GiB of records, no disk used
    line = one_line_error(xs("analyze", bad, "-o", tmp_path / "run"), "huge.xsp", "XSTAGE_MAX_DUMP_RECORDS=67108864")
    assert "67108864 records" in line


def test_the_record_limit_comes_from_the_environment(xs, tmp_path, monkeypatch):
    data = sample_dump_bytes()
    dump = write_dump(tmp_path / "a.xsp", data)
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", str(dump_records(data) - 1))
    one_line_error(xs("analyze", dump, "-o", tmp_path / "run"), "a.xsp", "XSTAGE_MAX_DUMP_RECORDS")
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", str(dump_records(data)))
    assert xs("analyze", dump, "-o", tmp_path / "run").rc == 0


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_record_limit_is_a_one_line_error(xs, tmp_path, monkeypatch, value):
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", value)
    one_line_error(xs("analyze", write_dump(tmp_path / "a.xsp", sample_dump_bytes()), "-o", tmp_path / "run"), "XSTAGE_MAX_DUMP_RECORDS")


# ----------------------------------------------------------------------------- calibration tables

@pytest.mark.parametrize("column,value", [
    ("V", "nan"), ("V", "inf"), ("V", "-1"), ("V", "0"), ("period_med_ns", "nan"), ("period_med_ns", "0"),
    ("tiss_med_ns", "-3"), ("tiss_p90_ns", "inf"), ("K", "0"), ("B", "text"), ("gap_ns", "-5"), ("gap_ns", "nan"),
])
def test_calibration_points_with_unusable_numbers(xs, tmp_path, column, value):
    df = pd.read_csv(REFERENCE / "h200_burst_gap_sweep.csv")
    df[column] = df[column].astype(object)
    df.loc[7, column] = value
    bad = tmp_path / "points.csv"
    df.to_csv(bad, index=False)
    out = tmp_path / "calib.json"
    line = one_line_error(xs("calibrate", "fit", bad, "--dest", df.loc[7, "dest"], "-o", out), "points.csv")
    assert f"column {column}" in line and "row 8" in line
    assert not out.exists()


def test_calibration_points_with_an_unknown_mode(xs, tmp_path):
    df = pd.read_csv(REFERENCE / "h200_burst_gap_sweep.csv")
    df.loc[3, "mode"] = "bogus"
    df.to_csv(tmp_path / "points.csv", index=False)
    one_line_error(xs("calibrate", "fit", tmp_path / "points.csv", "--dest", "host"), "points.csv", "modes")


def test_a_fit_without_drain_limited_launches_is_never_written(xs, tmp_path):
    """R is identified only by drain-limited launches (docs/model.md §3; at any gap, Eq. 1): with the largest
    gap alone (every (K, B) once, none backpressured against its own floor) no R exists."""
    df = pd.read_csv(REFERENCE / "h200_burst_gap_sweep.csv")
    df = df[(df["dest"] == "host") & (df["gap_ns"] == df["gap_ns"].max())]
    df.to_csv(tmp_path / "points.csv", index=False)
    out = tmp_path / "calib.json"
    one_line_error(xs("calibrate", "fit", tmp_path / "points.csv", "--dest", "host", "-o", out), "points.csv", "zero-gap")
    assert not out.exists()


def test_a_run_folders_calibration_points_are_checked(xs, tmp_path, reference_run):
    run = tmp_path / "run"
    shutil.copytree(reference_run, run)
    df = pd.read_csv(REFERENCE / "h200_burst_gap_sweep.csv")
    df.loc[0, "V"] = -1
    df.to_csv(run / "calibration_points.csv", index=False)
    one_line_error(xs("calibrate", "fit", run, "--dest", "local"), "calibration_points.csv", "column V")


# ----------------------------------------------------------------------------- calibration JSON

def _calib(**changes) -> dict:
    doc = json.loads((CALIB / "calibration_host.json").read_text())
    for k, v in changes.items():
        doc[k] = v
    return doc


@pytest.mark.parametrize("text,problem", [
    (json.dumps(_calib(rate_gbps=-5.0)), "rate_gbps"),
    (json.dumps(_calib(rate_gbps=0)), "rate_gbps"),
    (json.dumps(_calib(rate_gbps="fast")), "rate_gbps"),
    (json.dumps(_calib(rate_gbps=None)), "rate_gbps"),
    (json.dumps(_calib(rate_gbps=1.0)).replace('"rate_gbps": 1.0', '"rate_gbps": NaN'), "NaN"),
    (json.dumps(_calib(rate_gbps=1.0)).replace('"rate_gbps": 1.0', '"rate_gbps": Infinity'), "Infinity"),
    (json.dumps(_calib(issue_floor_ns={"132,8192": -1.0})), "issue_floor_ns"),
    (json.dumps(_calib(issue_floor_ns={"132,8192": 0})), "issue_floor_ns"),
    (json.dumps(_calib(issue_floor_ns={"x,y": 100.0})), "issue_floor_ns"),
    (json.dumps(_calib(issue_floor_ns={})), "issue_floor_ns"),
    (json.dumps(_calib(capacity_by_producers_bytes={"132": -1.0})), "capacity_by_producers_bytes"),
    (json.dumps(_calib(loop_overhead_ns=-3.0)), "loop_overhead_ns"),
    (json.dumps(_calib(calibration_version=6)), "calibration_version 6"),  # one past this release's version 5
    (json.dumps(_calib(store="tma")), "store 'tma'"),  # version 4 records the store instruction: stg or bulk
    (json.dumps({k: v for k, v in _calib().items() if k != "store"}), "store None"),
    (json.dumps({k: v for k, v in _calib().items() if k != "calibration_version"}), "calibration_version None"),
    ("[1, 2, 3]", "not an object"),
    ('{"rate_gbps": 1', "JSONDecodeError"),
    ("", "JSONDecodeError"),
])
def test_unusable_calibration_json(xs, tmp_path, text, problem):
    calib = tmp_path / "calib.json"
    calib.write_text(text)
    line = one_line_error(xs("analyze", reference_sqlite(), "--calibration", calib, "-o", tmp_path / "run"), "calib.json")
    assert problem in line
    assert not (tmp_path / "run").exists()


def test_model_sequence_checks_its_calibration_too(xs, tmp_path):
    calib = tmp_path / "calib.json"
    calib.write_text(json.dumps(_calib(rate_gbps=-1.0)))
    pd.DataFrame({"volume_bytes": [4e6], "gap_ns": [1000.0], "producers": [132]}).to_csv(tmp_path / "b.csv", index=False)
    one_line_error(xs("model", "sequence", tmp_path / "b.csv", "--calibration", calib), "calib.json", "calibrate fit")


@pytest.mark.parametrize("name", ["h200_calibration/calibration_host.json", "h200_calibration/calibration_local.json",
                                  "h200x2_peer/calibration_peer0to1.json", "h200x2_peer/calibration_peer1to0.json"])
def test_the_sample_calibrations_still_load(name):
    from xstage_trace.dataset.calibration import load_platform

    doc = json.loads((SAMPLES / name).read_text())
    m = load_platform(SAMPLES / name)
    assert m.rate_gbps == doc["rate_gbps"] > 0
    assert len(m.issue_floor_ns) == len(doc["issue_floor_ns"])


# ----------------------------------------------------------------------------- model flags

BURST = ["model", "burst", "--rate-gbps", "717", "--issue-floor-us", "0.76", "--producers", "148", "--bytes-per-producer", "32768"]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    args = list(args)
    if flag in args:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


@pytest.mark.parametrize("flag,value", [
    ("--rate-gbps", "0"), ("--rate-gbps", "-1"), ("--rate-gbps", "nan"), ("--rate-gbps", "inf"), ("--rate-gbps", "1e400"),
    ("--issue-floor-us", "0"), ("--issue-floor-us", "-0.5"), ("--producers", "0"), ("--producers", "-3"),
    ("--producers", str(2**40)), ("--bytes-per-producer", "0"), ("--bytes-per-producer", "1e300"), ("--gap-us", "-1"),
    ("--gap-us", "nan"), ("--capacity-mib", "0"), ("--capacity-mib", "-inf"),
])
def test_model_burst_flags_out_of_range(xs, flag, value):
    line = one_line_error(xs(*_with(BURST, flag, value)), flag)
    assert "out of range" in line


QLOOP = ["model", "qloop", "--sigma-us", "0.79", "--producers", "148", "--rate-gbps", "717", "--issue-floor-us", "0.76"]
INTERLEAVE = ["model", "interleave", "--volume-bytes", "7119810", "--mainloop-l1-us", "9.77", "--mainloop-l2-us", "5.30",
              "--n1", "1", "--n2", "1", "--issue-floor-us", "0.76", "--rate-gbps", "717"]
PARTITION = ["model", "partition", "--tokens-per-expert", "256,256", "--tokens", "512", "--hidden", "2048", "--reduction", "352",
             "--splits", "2", "--ranks", "4", "--num-sms", "8", "--rho", "1.0"]


@pytest.mark.parametrize("base,flag,value", [
    (QLOOP, "--sigma-us", "0"), (QLOOP, "--seq-len", "0"), (QLOOP, "--tile-m", "-128"), (QLOOP, "--kv-tile", "0"),
    (INTERLEAVE, "--n2", "0"), (INTERLEAVE, "--mainloop-l2-us", "nan"), (INTERLEAVE, "--volume-bytes", "inf"),
    (PARTITION, "--splits", "0"), (PARTITION, "--splits", str(10**9)), (PARTITION, "--rho", "nan"), (PARTITION, "--ranks", "0"),
    (PARTITION, "--tokens-per-expert", "256,-1"), (PARTITION, "--hidden", str(2**63)),
    (["model", "stall", "--cover-us", "1"], "--span-us", "-1"), (["model", "stall", "--cover-us", "1"], "--span-us", "inf"),
])
def test_model_flags_out_of_range(xs, base, flag, value):
    one_line_error(xs(*_with(base, flag, value)), flag, "give")


def test_partition_without_a_compute_sm(xs):
    one_line_error(xs(*_with(PARTITION, "--num-sms", "1")), "--num-sms", "SM count")


def test_partition_without_tokens(xs):
    one_line_error(xs(*_with(PARTITION, "--tokens-per-expert", "0,0")), "--tokens-per-expert")


@pytest.mark.parametrize("column,value", [("volume_bytes", -1.0), ("volume_bytes", np.inf), ("gap_ns", -10.0), ("producers", 0)])
def test_model_sequence_table_with_unusable_numbers(xs, tmp_path, column, value):
    df = pd.DataFrame({"volume_bytes": [4e6, 4e6, 4e6], "gap_ns": [1000.0, 1000.0, np.nan], "producers": [132, 132, 132]})
    df.loc[1, column] = value
    df.to_parquet(tmp_path / "bursts.parquet")
    one_line_error(xs("model", "sequence", tmp_path / "bursts.parquet", "--rate-gbps", "67", "--issue-floor-us", "1"), "bursts.parquet", column)


@pytest.mark.parametrize("by", ["nonexistent", ",,", "g,"])
def test_model_stall_by_unknown_columns(xs, tmp_path, by):
    pd.DataFrame({"span_us": [1.0, 3.0], "cover_us": [2.0, 1.0], "g": ["a", "b"]}).to_csv(tmp_path / "t.csv", index=False)
    one_line_error(xs("model", "stall", "--tiles", tmp_path / "t.csv", "--by", by), "t.csv", "span_us, cover_us, g")


@pytest.mark.parametrize("command", [["model", "sequence", "{f}", "--rate-gbps", "5", "--issue-floor-us", "1"], ["model", "stall", "--tiles", "{f}"]])
def test_model_tables_without_rows(xs, tmp_path, command):
    f = tmp_path / "empty.csv"
    f.write_text("volume_bytes,gap_ns,span_us,cover_us\n")
    one_line_error(xs(*[a.format(f=f) for a in command]), "empty.csv", "row")


# ----------------------------------------------------------------------------- strict JSON

def test_model_sequence_json_has_no_infinity(xs, tmp_path):
    """The last burst has no next one: its gap is unknown (empty) and must come out as null."""
    pd.DataFrame({"volume_bytes": [4e6, 4e6], "gap_ns": [1000.0, np.nan]}).to_csv(tmp_path / "b.csv", index=False)
    r = xs("model", "sequence", tmp_path / "b.csv", "--rate-gbps", "67", "--issue-floor-us", "1", "--json")
    assert r.rc == 0, r.err
    doc = r.json()  # parse_constant raises on NaN / Infinity
    assert doc["bursts"] == 2


def test_an_unbounded_gap_drains_the_backlog(xs, tmp_path):
    """docs/model.md §4 by hand: R = 1 B/ns, T0 = 1000 ns, V = 5000 B, G = 0 → Δb = 4000 B per burst; an empty
    gap (no next burst in that launch) is unbounded, Δb = −∞, so q restarts at 0 after it."""
    pd.DataFrame({"volume_bytes": [5000.0] * 5, "gap_ns": [0.0, 0.0, np.nan, 0.0, 0.0]}).to_csv(tmp_path / "b.csv", index=False)
    r = xs("model", "sequence", tmp_path / "b.csv", "--rate-gbps", "1", "--issue-floor-us", "1", "--json")
    assert r.rc == 0, r.err
    assert [row["q_bytes"] for row in r.json()["per_burst"]] == [0.0, 4000.0, 8000.0, 0.0, 4000.0]


def test_model_stall_json_with_missing_spans_is_strict(xs, tmp_path):
    pd.DataFrame({"span_us": [9.93, np.nan], "cover_us": [5.30, 5.30]}).to_csv(tmp_path / "t.csv", index=False)
    r = xs("model", "stall", "--tiles", tmp_path / "t.csv", "--json")
    assert r.rc == 0, r.err
    assert r.json()["predicted_stall_us"] == [pytest.approx(4.63), None]


def test_the_manifest_is_strict_json(reference_run):
    json.loads((reference_run / "manifest.json").read_text(), parse_constant=_no_constant)


def test_strict_dumps_turns_nan_and_inf_into_null():
    from xstage_trace.base.jsonable import dumps

    text = dumps({"a": float("nan"), "b": [np.float64("inf"), -np.inf, 1.5], "c": np.float32(2.0), "d": np.int64(3),
                  "e": os.fsdecode(b"x\xff"), "f": "\ud800", "g": "é"})
    assert json.loads(text, parse_constant=_no_constant) == {"a": None, "b": [None, None, 1.5], "c": 2.0, "d": 3,
                                                              "e": "x\\xff", "f": "\\ud800", "g": "é"}


# ----------------------------------------------------------------------------- SQLite file names

@pytest.mark.parametrize("name", ["a#b.sqlite", "a?b.sqlite", "a%b.sqlite", "a%23b.sqlite", "a?mode=rw.sqlite", "sp ace.sqlite", "a?b#c%d.sqlite"])
def test_sqlite_names_with_uri_characters_read_that_file(xs, tmp_path, name):
    folder = tmp_path / "in"
    folder.mkdir()
    src = folder / name
    shutil.copyfile(reference_sqlite(), src)
    decoy = folder / "a"  # what "file:.../a#b.sqlite" or "file:.../a?b.sqlite" would open instead
    shutil.copyfile(reference_sqlite(), decoy)
    run_sql(decoy, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > 3")
    before = snapshot(folder)
    r = xs("analyze", src, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert r.json()["kernels"] == REFERENCE_KERNELS
    assert snapshot(folder) == before  # nothing created, nothing written (read-only)


def test_the_read_only_uri_keeps_the_name():
    from urllib.parse import unquote, urlsplit

    from xstage_trace.collectors.nsys_tables import read_only_uri

    p = Path("/data/run #1?x=%41.sqlite")
    parts = urlsplit(read_only_uri(p))
    assert unquote(parts.path) == str(p) and parts.query == "mode=ro" and parts.fragment == ""


# ----------------------------------------------------------------------------- nsys exports of other shapes

@pytest.mark.parametrize("sql,fix_or_problem", [
    (["ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN demangledName"], "demangledName"),
    (["ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN start TO startNs"], "start"),
    (["ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN deviceId TO device"], "deviceId"),
    (["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 2"], "CUPTI_ACTIVITY_KIND_KERNEL.start"),
    (["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = X'0102' WHERE rowid = 3"], "CUPTI_ACTIVITY_KIND_KERNEL.start"),
    (["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 0.5 WHERE rowid = 1"], "CUPTI_ACTIVITY_KIND_KERNEL.end"),
    (["UPDATE GPU_METRICS SET timestamp = 'soon' WHERE rowid = 5"], "GPU_METRICS.timestamp"),
    (["UPDATE GPU_METRICS SET value = 'high'"], "GPU_METRICS.value"),
    (["ALTER TABLE GPU_METRICS DROP COLUMN typeId"], "typeId"),
    (["UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'yesterday'"], "utcEpochNs"),
    (["ALTER TABLE TARGET_INFO_GPU DROP COLUMN id"], "id"),
])
def test_exports_of_other_shapes_give_one_line(xs, sqlite_copy, sql, fix_or_problem):
    src = sqlite_copy("shaped.sqlite", *sql)
    line = one_line_error(xs("analyze", src, "-o", src.parent / "run"), "shaped.sqlite", "export")
    assert fix_or_problem in line
    assert not (src.parent / "run").exists()


@pytest.mark.parametrize("sql,warning,check", [
    (["DELETE FROM GPU_METRICS"], "GPU_METRICS is empty", lambda d: d["gpu_metrics"] == {}),
    (["DELETE FROM TARGET_INFO_GPU_METRICS"], "samples dropped", lambda d: d["gpu_metrics"] == {}),
    (["DROP TABLE TARGET_INFO_GPU_METRICS"], "GPU metric names unknown", lambda d: d["gpu_metrics"] == {}),
    (["DROP TABLE GPU_METRICS"], "no GPU metrics", lambda d: d["gpu_metrics"] == {} and d["kernels"] == REFERENCE_KERNELS),
    (["DROP TABLE META_DATA_EXPORT"], "schema version unknown", lambda d: d["kernels"] == REFERENCE_KERNELS),
    (["DROP TABLE TARGET_INFO_SESSION_START_TIME"], "UTC times unknown", lambda d: d["kernels"] == REFERENCE_KERNELS),
    (["DROP TABLE StringIds"], "StringIds missing", lambda d: d["kernels"] == REFERENCE_KERNELS),
    (["ALTER TABLE NVTX_EVENTS DROP COLUMN eventType"], "NVTX ranges not read", lambda d: d["nvtx_ranges"] == 0),
    (["DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME"], "not attributed to NVTX", lambda d: d["kernels"] == REFERENCE_KERNELS),
    (["ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN globalTid"], "not attributed to NVTX", lambda d: d["nvtx_ranges"] == REFERENCE_NVTX),
    (["DROP TABLE TARGET_INFO_GPU"], "GPU names unknown", lambda d: d["gpus"] == ["unknown"]),
])
def test_exports_missing_optional_parts_are_flagged(xs, sqlite_copy, sql, warning, check):
    src = sqlite_copy("partial.sqlite", *sql)
    r = xs("analyze", src, "-o", src.parent / "run", "--json")
    assert r.rc == 0, r.err
    doc = r.json()
    assert any(warning in w for w in doc["warnings"]), doc["warnings"]
    assert check(doc)


def test_metric_ids_that_would_overflow_a_packed_key(xs, sqlite_copy, tmp_path):
    """typeId·(max metricId + 1) + metricId wraps in int64 when max metricId = 2^16 − 1 and typeIds
    are 2^48 apart: (T, 0) and (T + 2^48, 0) then share a key. Each sample must keep its own
    metric's name, as SQLite's exact join on both columns gives it."""
    src = sqlite_copy("ids.sqlite",
                      *[f"UPDATE {t} SET metricId = 65535 WHERE metricId = 1" for t in ("TARGET_INFO_GPU_METRICS", "GPU_METRICS")],
                      *[f"UPDATE {t} SET typeId = typeId + {1 << 48}, metricId = 0 WHERE metricId = 2" for t in ("TARGET_INFO_GPU_METRICS", "GPU_METRICS")])
    con = sqlite3.connect(src)
    expect = dict(con.execute("SELECT n.metricName, count(*) FROM GPU_METRICS g JOIN "
                              "(SELECT DISTINCT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS) n "
                              "USING (typeId, metricId) GROUP BY n.metricName"))
    con.close()
    r = xs("analyze", src, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    got = pq.read_table(tmp_path / "run" / "gpu_metrics.parquet").column("metric_raw").cast(pa.string()).value_counts().to_pylist()
    assert {d["values"]: d["counts"] for d in got} == expect


def test_kernel_names_missing_from_the_string_table_are_flagged(xs, sqlite_copy, tmp_path):
    src = sqlite_copy("holes.sqlite", "DELETE FROM StringIds WHERE id = (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    con = sqlite3.connect(src)
    (lost,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE demangledName NOT IN (SELECT id FROM StringIds)").fetchone()
    con.close()
    r = xs("analyze", src, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert lost > 0 and f"{lost} kernels name a string id that StringIds lacks: their names are null" in r.json()["warnings"]
    assert pq.read_table(tmp_path / "run" / "kernels.parquet").column("name").null_count == lost


def test_missing_string_table_leaves_names_null_with_a_warning(xs, sqlite_copy):
    src = sqlite_copy("nostrings.sqlite", "DROP TABLE StringIds")
    r = xs("analyze", src, "-o", src.parent / "run")
    assert r.rc == 0
    assert "warning: StringIds missing" in r.err
    assert pq.read_table(src.parent / "run" / "kernels.parquet").column("name").null_count == REFERENCE_KERNELS


@pytest.mark.parametrize("case", ["truncated", "garbage", "empty"])
def test_damaged_sqlite_files(xs, tmp_path, case):
    bad = tmp_path / "damaged.sqlite"
    data = reference_sqlite().read_bytes()
    bad.write_bytes({"truncated": data[: 64 * 1024], "garbage": b"SQLite format 3\0" + os.urandom(8192), "empty": b""}[case])
    one_line_error(xs("analyze", bad, "-o", tmp_path / "run"), "damaged.sqlite")
    assert not (tmp_path / "run").exists()


PARQUET_TABLES = ("StringIds", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                  "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "TARGET_INFO_GPU", "GPU_METRICS", "TARGET_INFO_GPU_METRICS")


@pytest.fixture
def parquetdir(tmp_path) -> Path:
    """A parquetdir export (one TABLE.parquet per table) made from the reference SQLite export."""
    out = tmp_path / "pqdir"
    out.mkdir()
    con = sqlite3.connect(reference_sqlite())
    for t in PARQUET_TABLES:
        pq.write_table(pa.Table.from_pandas(pd.read_sql(f"SELECT * FROM {t}", con), preserve_index=False), out / f"{t}.parquet")
    con.close()
    return out


def test_parquetdir_control(xs, parquetdir, tmp_path):
    r = xs("analyze", parquetdir, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert r.json()["kernels"] == REFERENCE_KERNELS and r.json()["nvtx_ranges"] == REFERENCE_NVTX


@pytest.mark.parametrize("case", ["garbled", "truncated", "column dropped"])
def test_parquetdir_with_a_damaged_kernel_table(xs, parquetdir, tmp_path, case):
    f = parquetdir / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    if case == "garbled":
        f.write_bytes(b"PAR1" + os.urandom(4096))
    elif case == "truncated":
        f.write_bytes(f.read_bytes()[:-100])
    else:
        pq.write_table(pq.read_table(f).drop_columns(["shortName"]), f)
    one_line_error(xs("analyze", parquetdir, "-o", tmp_path / "run"), "CUPTI_ACTIVITY_KIND_KERNEL" if case != "column dropped" else "pqdir")


def test_parquetdir_without_string_table_warns(xs, parquetdir, tmp_path):
    (parquetdir / "StringIds.parquet").unlink()
    r = xs("analyze", parquetdir, "-o", tmp_path / "run", "--json")
    assert r.rc == 0
    assert any("StringIds missing" in w for w in r.json()["warnings"])


# ----------------------------------------------------------------------------- tampered run folders

def _tamper(run: Path, case: str) -> None:
    man = run / "manifest.json"
    doc = json.loads(man.read_text())
    if case == "manifest garbled":
        man.write_text(man.read_text()[:-40])
    elif case == "manifest a list":
        man.write_text("[]")
    elif case == "manifest of another tool":
        man.write_text(json.dumps(dict(doc, tool="other")))
    elif case == "manifest from the future":
        man.write_text(json.dumps(dict(doc, schema_version=99)))
    elif case == "manifest with NaN":
        man.write_text(json.dumps(dict(doc, schema_version="@")).replace('"schema_version": "@"', '"schema_version": NaN'))
    elif case == "row count edited":
        doc["tables"]["kernels"] = 3
        man.write_text(json.dumps(doc))
    elif case == "kernels missing":
        (run / "kernels.parquet").unlink()
    elif case == "kernels garbled":
        (run / "kernels.parquet").write_bytes(b"PAR1" + b"\0" * 512)
    elif case == "kernels swapped for nvtx":
        shutil.copyfile(run / "nvtx.parquet", run / "kernels.parquet")
    elif case == "kernel times edited":
        k = pq.read_table(run / "kernels.parquet")
        k = k.set_column(k.schema.get_field_index("start_ns"), "start_ns", pa.array(np.zeros(k.num_rows, np.int64)))
        pq.write_table(k, run / "kernels.parquet")
    elif case == "manifest lists a file outside":
        doc["files"]["../../etc/passwd"] = "0" * 64
        man.write_text(json.dumps(doc))
    elif case == "kernels with wrong types":
        pq.write_table(pa.table({"rank": pa.array(["zero"] * 17), "start_ns": pa.array(["x"] * 17)}), run / "kernels.parquet")


RUN_CASES = ["manifest garbled", "manifest a list", "manifest of another tool", "manifest from the future", "manifest with NaN",
             "row count edited", "kernels missing", "kernels garbled", "kernels swapped for nvtx", "kernels with wrong types",
             "kernel times edited", "manifest lists a file outside"]


@pytest.mark.parametrize("case", RUN_CASES)
def test_tampered_run_folders(xs, reference_run, tmp_path, case):
    run = tmp_path / "given.xstage-run"
    shutil.copytree(reference_run, run)
    _tamper(run, case)
    before = snapshot(run)
    one_line_error(xs("analyze", run, "-o", tmp_path / "again"), "given.xstage-run")
    assert not (tmp_path / "again").exists()
    assert snapshot(run) == before


@pytest.mark.parametrize("case", ["manifest garbled", "kernels garbled", "row count edited"])
def test_tampered_run_folders_in_model_sequence(xs, reference_run, tmp_path, case):
    run = tmp_path / "given.xstage-run"
    shutil.copytree(reference_run, run)
    _tamper(run, case)
    one_line_error(xs("model", "sequence", run, "--rate-gbps", "67", "--issue-floor-us", "1"), "given.xstage-run")


def test_open_run_on_a_tampered_manifest_raises_input_error(reference_run, tmp_path):
    import xstage_trace

    run = tmp_path / "given.xstage-run"
    shutil.copytree(reference_run, run)
    _tamper(run, "kernels swapped for nvtx")
    with pytest.raises(InputError, match="sha256"):
        xstage_trace.open_run(run).kernels()


# ----------------------------------------------------------------------------- .nsys-rep handling

FAKE_NSYS = """#!{python}
import os, shutil, sys
with open(os.environ["FAKE_NSYS_LOG"], "a") as log:
    log.write(repr(sys.argv[1:]) + "\\n")
if sys.argv[1:] == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.2.0-253540391230v0")
    sys.exit(0)
mode = os.environ.get("FAKE_NSYS_MODE", "ok")
if mode == "fail":
    sys.stderr.write("fatal: cannot open report\\n")
    sys.exit(3)
out = sys.argv[sys.argv.index("-o") + 1]
if mode != "silent":
    shutil.copyfile(os.environ["FAKE_NSYS_SOURCE"], out)
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    """An nsys stand-in (no Nsight Systems here) that 'exports' by copying the reference SQLite."""
    exe = tmp_path / "bin" / "nsys"
    exe.parent.mkdir()
    exe.write_text(FAKE_NSYS.format(python=sys.executable))
    exe.chmod(0o755)
    log = tmp_path / "nsys.log"
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("FAKE_NSYS_SOURCE", str(reference_sqlite()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return FakeNsys(exe, log)


@dataclass
class FakeNsys:
    exe: Path
    log: Path

    def __str__(self) -> str:
        return str(self.exe)

    def calls(self) -> list[list[str]]:
        """argv of every ``nsys export`` run so far."""
        import ast

        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [ast.literal_eval(l) for l in lines if "export" in l]


@pytest.fixture
def report(tmp_path) -> Path:
    d = tmp_path / "reports"
    d.mkdir()
    dst = d / "capture.nsys-rep"
    shutil.copyfile(REFERENCE / "h200_burst_gap_quick.nsys-rep", dst)
    return dst


def _cache_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".nsys-rep")


def test_report_export_is_cached_with_a_sidecar_and_reused(xs, fake_nsys, report, tmp_path):
    r = xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "r1", "--json")
    assert r.rc == 0, r.err
    assert r.json()["kernels"] == REFERENCE_KERNELS
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    assert _cache_files(report.parent) == [f"capture.nsys-rep.{digest[:16]}.export.json", f"capture.nsys-rep.{digest[:16]}.sqlite"]
    side = json.loads((report.parent / f"capture.nsys-rep.{digest[:16]}.export.json").read_text())
    assert side["report_sha256"] == digest
    assert side["export_sha256"] == hashlib.sha256(reference_sqlite().read_bytes()).hexdigest()
    assert xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "r2").rc == 0
    assert len(fake_nsys.calls()) == 1  # the second run trusted the verified cache


@pytest.mark.parametrize("plant", ["no sidecar", "forged sidecar", "stale sidecar", "symlink", "sidecar symlink"])
def test_planted_or_stale_caches_are_not_trusted(xs, fake_nsys, report, tmp_path, plant):
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    cache = report.parent / f"capture.nsys-rep.{digest[:16]}.sqlite"
    side = report.parent / f"capture.nsys-rep.{digest[:16]}.export.json"
    decoy = tmp_path / "decoy.sqlite"
    shutil.copyfile(reference_sqlite(), decoy)
    run_sql(decoy, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid > 2")  # a wrong answer: 2 kernels
    decoy_sha = hashlib.sha256(decoy.read_bytes()).hexdigest()
    if plant == "symlink":
        cache.symlink_to(decoy)
        side.write_text(json.dumps({"report_sha256": digest, "export_sha256": decoy_sha}))
    else:
        shutil.copyfile(decoy, cache)
        doc = {"no sidecar": None, "forged sidecar": {"report_sha256": digest, "export_sha256": "0" * 64},
               "stale sidecar": {"report_sha256": "f" * 64, "export_sha256": decoy_sha},
               "sidecar symlink": "link"}[plant]
        if doc == "link":
            (tmp_path / "side.json").write_text(json.dumps({"report_sha256": digest, "export_sha256": decoy_sha}))
            side.symlink_to(tmp_path / "side.json")
        elif doc is not None:
            side.write_text(json.dumps(doc))
    decoy_before = decoy.read_bytes()
    r = xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert r.json()["kernels"] == REFERENCE_KERNELS  # re-exported, not the planted 2-kernel file
    assert len(fake_nsys.calls()) == 1
    assert decoy.read_bytes() == decoy_before  # a symlink's target is never written through
    assert not cache.is_symlink()


def test_a_folder_in_the_way_of_the_cache(xs, fake_nsys, report, tmp_path):
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    blocker = report.parent / f"capture.nsys-rep.{digest[:16]}.sqlite"
    (blocker / "mine.txt").parent.mkdir()
    (blocker / "mine.txt").write_text("x")
    one_line_error(xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "run"), "capture.nsys-rep", "in the way")
    assert (blocker / "mine.txt").read_text() == "x"
    assert sorted(p.name for p in report.parent.iterdir()) == ["capture.nsys-rep", blocker.name]


def test_a_report_named_like_an_option(xs, fake_nsys, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    shutil.copyfile(REFERENCE / "h200_burst_gap_quick.nsys-rep", d / "-o.nsys-rep")
    r = xs("analyze", "--nsys", fake_nsys, "-o", tmp_path / "run", "--json", "--", "-o.nsys-rep", cwd=d)
    assert r.rc == 0, r.err
    (call,) = fake_nsys.calls()
    assert call[-1] == str(d / "-o.nsys-rep")  # absolute: nsys cannot read it as an option
    assert all(not a.endswith(".nsys-rep") or a.startswith("/") for a in call)


def test_a_report_with_a_very_long_name(xs, fake_nsys, tmp_path):
    d = tmp_path / "long"
    d.mkdir()
    name = "r" * (255 - len(".nsys-rep")) + ".nsys-rep"  # NAME_MAX: no suffix fits behind it
    shutil.copyfile(REFERENCE / "h200_burst_gap_quick.nsys-rep", d / name)
    r = xs("analyze", d / name, "--nsys", fake_nsys, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert r.json()["kernels"] == REFERENCE_KERNELS
    digest = hashlib.sha256((d / name).read_bytes()).hexdigest()
    assert (d / f"{digest[:32]}.nsys-rep.sqlite").is_file()
    assert all(len(p.name) <= 255 for p in d.iterdir())


def test_a_read_only_report_folder_uses_the_user_cache(xs, fake_nsys, report, tmp_path, monkeypatch):
    """A read-only folder refuses the temporary folder; root ignores modes, so the refusal is the
    one mkdtemp gives there (EACCES) when running as root, and a real chmod otherwise."""
    import tempfile

    from xstage_trace.collectors import nsys_rep

    if os.geteuid() == 0:
        real = tempfile.mkdtemp

        def read_only_here(*a, dir=None, **k):
            if Path(dir) == report.parent:
                raise PermissionError(13, "Permission denied", str(dir))
            return real(*a, dir=dir, **k)

        monkeypatch.setattr(nsys_rep.tempfile, "mkdtemp", read_only_here)
    else:
        report.parent.chmod(0o555)
    try:
        r = xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "run", "--json")
    finally:
        report.parent.chmod(0o755)
    assert r.rc == 0, r.err
    cached = sorted(p.name for p in (tmp_path / "xdg" / "xstage-trace").iterdir() if p.name != "decoded")
    assert len(cached) == 2 and cached[1].endswith(".sqlite") and cached[0].endswith(".export.json")
    assert (tmp_path / "xdg" / "xstage-trace" / "decoded").is_dir()  # the export as read (collectors/export_cache.py)
    assert stat.S_IMODE((tmp_path / "xdg" / "xstage-trace").stat().st_mode) == 0o700
    assert _cache_files(report.parent) == []
    assert xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "run2").rc == 0
    assert len(fake_nsys.calls()) == 1  # found again in the user cache


@pytest.mark.parametrize("mode", ["fail", "silent"])
def test_a_failing_nsys_leaves_nothing_beside_the_report(xs, fake_nsys, report, tmp_path, monkeypatch, mode):
    monkeypatch.setenv("FAKE_NSYS_MODE", mode)
    one_line_error(xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "run"), "capture.nsys-rep")
    assert _cache_files(report.parent) == []
    assert not (tmp_path / "run").exists()


def test_a_planted_user_cache_symlink_is_not_used(xs, fake_nsys, report, tmp_path, monkeypatch):
    (tmp_path / "attacker").mkdir()
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "xstage-trace").symlink_to(tmp_path / "attacker")
    monkeypatch.setattr("xstage_trace.collectors.nsys_rep.tempfile.mkdtemp", _refuse_in(report.parent))
    one_line_error(xs("analyze", report, "--nsys", fake_nsys, "-o", tmp_path / "run"), "capture.nsys-rep", "XDG_CACHE_HOME")
    assert list((tmp_path / "attacker").iterdir()) == []


def _refuse_in(folder: Path):
    import tempfile

    real = tempfile.mkdtemp

    def mkdtemp(*a, dir=None, **k):
        if Path(dir) == folder:
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*a, dir=dir, **k)

    return mkdtemp


# ----------------------------------------------------------------------------- not regular files

@pytest.mark.parametrize("name", ["pipe.xsp", "pipe.sqlite", "pipe.nsys-rep", "pipe"])
def test_a_fifo_input_is_refused_without_blocking(tmp_path, name):
    os.mkfifo(tmp_path / name)
    r = subprocess_cli("analyze", tmp_path / name, "-o", tmp_path / "run", timeout=60)
    one_line_error(r, name, "FIFO")


def test_a_fifo_inside_a_dump_folder_is_refused_without_blocking(tmp_path):
    d = tmp_path / "dumps"
    d.mkdir()
    write_dump(d / "a.xsp", sample_dump_bytes())
    os.mkfifo(d / "b.xsp")
    one_line_error(subprocess_cli("analyze", d, "-o", tmp_path / "run", timeout=60), "b.xsp", "FIFO")


@pytest.mark.parametrize("args", [
    ["analyze", "/dev/zero", "-o", "{tmp}/run"],
    ["analyze", "{ref}", "--calibration", "/dev/zero", "-o", "{tmp}/run"],
    ["calibrate", "fit", "/dev/zero", "--dest", "host"],
    ["model", "stall", "--tiles", "/dev/zero"],
    ["model", "sequence", "/dev/zero", "--rate-gbps", "67"],
])
def test_devices_are_refused_without_reading(tmp_path, args):
    args = [a.format(tmp=tmp_path, ref=reference_sqlite()) for a in args]
    one_line_error(subprocess_cli(*args, timeout=60), "/dev/zero", "character device")


def test_a_fifo_as_a_tiles_table(tmp_path):
    os.mkfifo(tmp_path / "tiles.csv")
    one_line_error(subprocess_cli("model", "stall", "--tiles", tmp_path / "tiles.csv", timeout=60), "tiles.csv", "FIFO")


@pytest.mark.parametrize("case", ["symlink loop", "dangling symlink"])
def test_broken_symlinks_as_inputs(xs, tmp_path, case):
    link = tmp_path / "in.xsp"
    link.symlink_to(link if case == "symlink loop" else tmp_path / "gone.xsp")
    one_line_error(xs("analyze", link, "-o", tmp_path / "run"), "in.xsp")


def test_oversized_json_inputs_are_refused_unread(xs, tmp_path, reference_run):
    calib = tmp_path / "calib.json"
    with open(calib, "wb") as fh:
        fh.truncate(17 << 20)  # sparse: 17 MiB of nothing
    one_line_error(xs("analyze", reference_sqlite(), "--calibration", calib, "-o", tmp_path / "run"), "calib.json", "larger than")
    run = tmp_path / "big.xstage-run"
    shutil.copytree(reference_run, run)
    with open(run / "manifest.json", "r+b") as fh:
        fh.truncate(65 << 20)
    one_line_error(xs("analyze", run, "-o", tmp_path / "run2"), "manifest.json", "larger than")


# ----------------------------------------------------------------------------- usage errors and names

@pytest.mark.parametrize("args,part", [
    (["analyze"], "Missing argument"),
    (["analyze", "x.xsp", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
    (["calibrate", "fit"], "Missing argument"),
    (BURST[:-2], "--bytes-per-producer"),
    (_with(BURST, "--rate-gbps", "abc"), "--rate-gbps"),
    (_with(BURST, "--producers", "1.5"), "--producers"),
    (["model", "qloop", "--sigma-us"], "--sigma-us"),
])
def test_usage_errors_are_one_line(xs, args, part):
    line = one_line_error(xs(*args), part)
    assert "--help" in line


@pytest.mark.parametrize("name", ["new\nline.xsp", "tab\there.xsp", "esc\x1b[31mred.xsp", "[bold]markup[/bold].xsp", "bell\x07.sqlite"])
def test_file_names_with_control_characters_stay_on_one_line(xs, tmp_path, name):
    missing = tmp_path / name
    line = one_line_error(xs("analyze", missing, "-o", tmp_path / "run"), fix="check the path")
    assert repr(str(missing)) in line if not str(missing).isprintable() else str(missing) in line
    assert "\x1b" not in line and "\x07" not in line


def test_a_dump_whose_name_is_not_utf8(xs, tmp_path):
    name = os.fsdecode(b"dump-\xff\xfe.xsp")
    data = sample_dump_bytes()
    write_dump(tmp_path / name, data)
    r = xs("analyze", tmp_path / name, "-o", tmp_path / "run", "--json")
    assert r.rc == 0, r.err
    assert r.json()["probes"] == dump_records(data)
    dumps = open_run(tmp_path / "run").probe_slices()["dump"].astype(str).unique().tolist()
    assert dumps == ["dump-\\xff\\xfe.xsp"]
    text = (tmp_path / "run" / "manifest.json").read_text()
    text.encode("utf-8")  # no lone surrogate: any JSON reader accepts it
    assert json.loads(text)["inputs"][0]["path"].endswith("dump-\\xff\\xfe.xsp")


def test_warnings_with_markup_in_file_names_are_shown_literally(xs, tmp_path):
    d = tmp_path / "[bold]dumps"
    d.mkdir()
    data = sample_dump_bytes()
    write_dump(d / "a.xsp", data)
    write_dump(d / "b.xsp", data)
    r = xs("analyze", d, "-o", tmp_path / "run")
    assert r.rc == 0, r.err
    assert "[bold]dumps" in r.err  # the duplicate warning names the folder as it is, not as rich markup


def test_markup_in_a_gpu_name_prints_literally(xs, tmp_path):
    """The GPU name comes from the dump header; rich would parse "[/x]" in it as a closing tag and raise."""
    data = sample_dump_bytes()
    h = np.frombuffer(data[: HEADER_DTYPE.itemsize], HEADER_DTYPE)[0].copy()
    h["gpu_name"] = b"NVIDIA H200 [/x][bold]"
    dump = write_dump(tmp_path / "gpu.xsp", h.tobytes() + data[HEADER_DTYPE.itemsize:])
    r = xs("analyze", dump, "-o", tmp_path / "run")
    assert r.rc == 0, r.err
    assert "NVIDIA H200 [/x][bold]" in r.out


def test_one_line_quotes_control_characters():
    e = InputError("a\nb.xsp", "bad\nthing", "fix\tit")
    assert e.one_line() == "'a\\nb.xsp': bad\\nthing; fix\\tit"
    assert InputError("plain.xsp", "p", "f").one_line() == "plain.xsp: p; f"


def test_two_different_dumps_of_one_name_and_rank_are_refused_before_any_output(xs, tmp_path):
    """A run keys its dumps by (rank, file name): two dumps that share both would have their slices and
    records taken for one dump's. The second is refused, naming it, and no run folder is left."""
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    data = sample_dump_bytes()
    write_dump(first / "d.xsp", data)
    write_dump(second / "d.xsp", set_header(data, "sm_clock_khz", 1_500_000))  # other bytes: not a duplicate input
    r = xs("analyze", first / "d.xsp", second / "d.xsp", "-o", tmp_path / "run")
    one_line_error(r, str(second / "d.xsp"), fix="rename one of the two dump files")
    assert not (tmp_path / "run").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
