"""Property-based fuzzing (Hypothesis) of the readers a user's files reach (issue 25): the probe-dump
decoder (plain and zstd), the Nsight SQLite reader, the run-folder reader and the calibration
readers (JSON and points tables). The property: anything but valid input ends in InputError, whose
message is one line (the CLI prints it and exits 2); valid input round-trips.

Derandomized, so a run is reproducible; about two minutes on two cores in all (HYPOTHESIS_FUZZ_SCALE
multiplies the examples for a longer hunt).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CALIB, FUSED, reference_sqlite
from xstage_trace.base.errors import InputError

SCALE = float(os.environ.get("HYPOTHESIS_FUZZ_SCALE", "1"))


def fuzz(examples: int):
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])


def refused_or_read(fn, *args):
    """``fn(*args)``'s value, or None when it raised InputError with a one-line message; any other
    exception fails the property."""
    try:
        return fn(*args)
    except InputError as exc:
        assert "\n" not in exc.one_line() and exc.one_line().strip()
        return None


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


# ----------------------------------------------------------------------------- probe dumps

def _dump(path: Path, counts: list[int], capacity: int, events: int, tiles: np.ndarray | None = None, seed: int = 0) -> Path:
    """A valid dump: slices open 1 ms apart, 100 µs long, at 2 GHz; records of known events in time order."""
    from xstage_trace.base.probe_layout import RECORD_DTYPE, SLICE_DTYPE
    from xstage_trace.instrument.probe_writer import write_probe_dump

    rng = np.random.default_rng(seed)
    n = len(counts)
    sl = np.zeros(n, SLICE_DTYPE)
    sl["count"], sl["closed"] = counts, 1
    sl["smid_open"] = sl["smid_close"] = np.arange(n) % 132
    sl["gt_open"] = 1_700_000_000_000_000_000 + np.arange(n) * 1_000_000
    sl["gt_close"] = sl["gt_open"] + 100_000
    sl["clk_open"] = 10_000_000 + np.arange(n) * 2_000_000
    sl["clk_close"] = sl["clk_open"] + 200_000
    rec = np.zeros((n, capacity), RECORD_DTYPE)
    for i in range(n):
        k = min(counts[i], capacity)
        clk = sl["clk_open"][i] + np.sort(rng.integers(1, 200_000, k))
        ev = rng.integers(0, events, k).astype(np.uint64)
        kind = rng.integers(0, 3, k).astype(np.uint64)
        rec["ts_ev"][i, :k] = clk.astype(np.uint64) | (ev << np.uint64(48)) | (kind << np.uint64(56))
        rec["tile"][i, :k] = tiles[i, :k] if tiles is not None else rng.integers(0, 1000, k)
        rec["payload"][i, :k] = rng.integers(0, 2**32, k, dtype=np.uint64)
    write_probe_dump(path, slice_meta=sl, records=rec.reshape(-1), capacity=capacity, event_names=[f"ev{e}" for e in range(events)],
                     gpu_name="NVIDIA H200", sm_count=132, sm_clock_khz=2_000_000, label="kernel=fuzz")
    return path


@pytest.fixture(scope="module")
def base_dump(tmp_path_factory) -> bytes:
    return _dump(tmp_path_factory.mktemp("dump") / "base.xsp", [5, 0, 12, 7], 8, 3).read_bytes()


@fuzz(60)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=6), capacity=st.integers(1, 32), events=st.integers(1, 8),
       seed=st.integers(0, 2**16), compressed=st.booleans())
def test_valid_dumps_round_trip(tmp_path_factory, counts, capacity, events, seed, compressed):
    from xstage_trace.collectors.probe_format import decode_probe_dump

    folder = tmp_path_factory.mktemp("rt")
    tiles = np.random.default_rng(seed + 1).integers(0, 5000, (len(counts), capacity))
    path = _dump(folder / "d.xsp", counts, capacity, events, tiles, seed)
    if compressed:
        with pa.output_stream(str(folder / "d.xsp.zst"), compression="zstd") as fh:
            fh.write(path.read_bytes())
        path.unlink()
        path = folder / "d.xsp.zst"
    d = decode_probe_dump(path, allow_overflow=True)
    stored = [min(c, capacity) for c in counts]
    assert d.records.num_rows == sum(stored)
    want = np.concatenate([tiles[i, :k] for i, k in enumerate(stored)]) if sum(stored) else np.zeros(0)
    assert np.array_equal(np.sort(d.records["tile"].to_numpy()), np.sort(want))
    shutil.rmtree(folder)


@fuzz(250)
@given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.binary(min_size=1, max_size=8)), min_size=1, max_size=4),
       cut=st.none() | st.integers(0, 3000), compressed=st.booleans())
def test_damaged_dumps_are_refused_in_one_line(base_dump, tmp_path_factory, edits, cut, compressed):
    from xstage_trace.collectors.probe_format import decode_probe_dump

    data = bytearray(base_dump)
    for pos, chunk in edits:
        pos %= len(data)
        data[pos: pos + len(chunk)] = chunk
    data = bytes(data[:cut] if cut is not None else data)
    folder = tmp_path_factory.mktemp("bad")
    path = folder / ("d.xsp.zst" if compressed else "d.xsp")
    if compressed:
        with pa.output_stream(str(path), compression="zstd") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    refused_or_read(decode_probe_dump, path)
    refused_or_read(decode_probe_dump, path, None, True)  # with --allow-overflow
    shutil.rmtree(folder)


@fuzz(60)
@given(frame=st.binary(min_size=0, max_size=64))
def test_garbage_zstd_frames_are_refused(tmp_path_factory, frame):
    from xstage_trace.collectors.probe_format import ZSTD_MAGIC, decode_probe_dump

    path = tmp_path_factory.mktemp("z") / "d.xsp.zst"
    path.write_bytes(ZSTD_MAGIC + frame)
    assert refused_or_read(decode_probe_dump, path) is None


# ----------------------------------------------------------------------------- Nsight SQLite exports

NSYS_TABLES = {  # table → columns the reader reads
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "shortName", "demangledName", "correlationId", "gridX", "blockX"],
    "StringIds": ["id", "value"],
    "NVTX_EVENTS": ["start", "end", "text", "textId", "eventType", "domainId", "globalTid"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs"],
}


@pytest.fixture(scope="module")
def nsys_copy(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nsys") / "base.sqlite"
    shutil.copyfile(reference_sqlite(), path)
    return path


@fuzz(40)
@given(table=st.sampled_from(sorted(NSYS_TABLES)), data=st.data(),
       value=st.none() | st.integers(-2**63, 2**63 - 1) | st.floats() | st.text(max_size=12) | st.binary(max_size=12),
       rows=st.sampled_from(["rowid % 7 = 0", "rowid = 1", "1"]))
def test_nsys_exports_with_odd_values(nsys_copy, tmp_path_factory, table, data, value, rows):
    from xstage_trace.collectors.nsys_reader import read_nsys_export

    column = data.draw(st.sampled_from(NSYS_TABLES[table]))
    path = tmp_path_factory.mktemp("n") / "e.sqlite"
    shutil.copyfile(nsys_copy, path)
    con = sqlite3.connect(path)
    try:
        con.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE {rows}', (value,))
        con.commit()
    except sqlite3.Error:  # the column is not in this export: nothing to break
        pass
    con.close()
    refused_or_read(read_nsys_export, path)
    shutil.rmtree(path.parent)


@fuzz(25)
@given(edits=st.lists(st.tuples(st.floats(0, 1), st.binary(min_size=1, max_size=64)), min_size=1, max_size=3))
def test_nsys_exports_with_damaged_pages(nsys_copy, tmp_path_factory, edits):
    from xstage_trace.collectors.nsys_reader import read_nsys_export

    data = bytearray(nsys_copy.read_bytes())
    for frac, chunk in edits:
        pos = int(frac * (len(data) - len(chunk)))
        data[pos: pos + len(chunk)] = chunk
    path = tmp_path_factory.mktemp("n") / "e.sqlite"
    path.write_bytes(bytes(data))
    refused_or_read(read_nsys_export, path)
    shutil.rmtree(path.parent)


# ----------------------------------------------------------------------------- run folders

@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    from xstage_trace.pipeline.runner import analyze_inputs

    out = tmp_path_factory.mktemp("run") / "local.run"
    analyze_inputs(sorted((FUSED / "traced").glob("fused_local_S1_*.xsp.zst")), out, calibration=CALIB / "calibration_local.json")
    return out


def _read_everything(run_dir: Path):
    import xstage_trace

    run = xstage_trace.open_run(run_dir)
    run.alignment(), run.warnings(), run.table3(), run.calibration(), run.calibration_document(), run.calibration_path()
    for name in ("kernels", "dumps", "probe_slices", "tiles", "bursts", "probes"):
        run.table(name)
    return run


def test_the_run_reads_back(small_run):
    run = _read_everything(small_run)
    assert len(run.tiles()) == json.loads((small_run / "manifest.json").read_text())["tables"]["tiles"]


@fuzz(120)
@given(field=st.sampled_from(["tool", "schema_version", "tables", "files", "alignment", "gpus", "inputs", "warnings", "calibration",
                              "calibration_file", "time_base", "warmup_launches", "calibration_points", "tool_version"]),
       value=json_values)
def test_manifests_with_odd_fields(small_run, tmp_path_factory, field, value):
    run = tmp_path_factory.mktemp("m") / "r.run"
    shutil.copytree(small_run, run)
    doc = json.loads((run / "manifest.json").read_text())
    doc[field] = value
    (run / "manifest.json").write_text(json.dumps(doc))
    refused_or_read(_read_everything, run)
    shutil.rmtree(run.parent)


@fuzz(40)
@given(which=st.integers(0, 10_000), pos=st.floats(0, 1), chunk=st.binary(min_size=1, max_size=16), rehash=st.booleans())
def test_run_files_with_damaged_bytes(small_run, tmp_path_factory, which, pos, chunk, rehash):
    import hashlib

    run = tmp_path_factory.mktemp("f") / "r.run"
    shutil.copytree(small_run, run)
    doc = json.loads((run / "manifest.json").read_text())
    rel = sorted(doc["files"])[which % len(doc["files"])]
    data = bytearray((run / rel).read_bytes())
    at = int(pos * max(len(data) - 1, 0))
    data[at: at + len(chunk)] = chunk
    (run / rel).write_bytes(bytes(data))
    if rehash:  # the manifest agrees with the damaged bytes: the file's own checks must refuse them
        doc["files"][rel] = hashlib.sha256(bytes(data)).hexdigest()
        (run / "manifest.json").write_text(json.dumps(doc))
    refused_or_read(_read_everything, run)
    shutil.rmtree(run.parent)


# ----------------------------------------------------------------------------- calibration JSON and points

def _walk(doc, path=()):
    """Every (path, value) inside a JSON document."""
    yield path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _walk(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _walk(v, (*path, i))


CALIBRATION = json.loads((CALIB / "calibration_host.json").read_text())
CALIBRATION_PATHS = [p for p, _ in _walk(CALIBRATION) if p]


def test_calibration_json_round_trips(tmp_path):
    from xstage_trace.collectors.calibration_io import read_document
    from xstage_trace.dataset.calibration import load_platform

    path = tmp_path / "c.json"
    path.write_text(json.dumps(read_document(CALIB / "calibration_host.json")))
    assert read_document(path) == CALIBRATION and load_platform(path) == load_platform(CALIB / "calibration_host.json")


@fuzz(250)
@given(where=st.integers(0, len(CALIBRATION_PATHS) - 1), value=json_values | st.sampled_from(["NaN", "Infinity"]), delete=st.booleans())
def test_calibration_json_with_odd_values(tmp_path_factory, where, value, delete):
    from xstage_trace.dataset.calibration import load_platform

    import copy

    doc = copy.deepcopy(CALIBRATION)
    *parent, key = CALIBRATION_PATHS[where]
    node = doc
    for k in parent:
        node = node[k]
    if delete and isinstance(node, dict):
        del node[key]
    else:
        node[key] = value
    path = tmp_path_factory.mktemp("c") / "c.json"
    text = json.dumps(doc)
    if value in ("NaN", "Infinity"):
        text = text.replace(f'"{value}"', value)  # a non-strict token where a number goes
    path.write_text(text)
    refused_or_read(load_platform, path)
    shutil.rmtree(path.parent)


POINTS = pd.read_csv(CALIB / "calibration_points.csv")


@fuzz(60)
@given(row=st.integers(0, len(POINTS) - 1), column=st.sampled_from(list(POINTS.columns)),
       value=st.none() | st.integers(-10**12, 10**12) | st.floats() | st.text(max_size=10), drop=st.booleans())
def test_calibration_points_with_odd_values(tmp_path_factory, row, column, value, drop):
    from xstage_trace.pipeline.runner import load_measurements

    pts = POINTS.astype(object)
    if drop:
        pts = pts.drop(columns=[column])
    else:
        pts.iloc[row, pts.columns.get_loc(column)] = value
    path = tmp_path_factory.mktemp("p") / "p.csv"
    pts.to_csv(path, index=False)
    refused_or_read(load_measurements, path)
    shutil.rmtree(path.parent)
