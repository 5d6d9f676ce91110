"""Probe dump decoding on real H200 dumps, the Python writer, and every kind of bad dump."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import CALIB, dump_bytes
from xstage_trace.base.probe_layout import HEADER_DTYPE, RECORD_DTYPE, SLICE_DTYPE
from xstage_trace.collectors.probe_format import decode_probe_dump, read_header
from xstage_trace.instrument.probe_writer import write_probe_dump
from xstage_trace.base.errors import InputError

DUMP = CALIB / "sweep_host" / "host_periodic_K132_B32768_G2000.xsp.zst"


def test_decodes_real_dump():
    d = decode_probe_dump(DUMP)
    assert d.header["gpu_name"] == "NVIDIA H200"
    assert d.header["sm_count"] == 132 and d.header["num_slices"] == 132
    c = d.config  # the file name host_periodic_K132_B32768_G2000 names the same sweep point
    assert (c.dest, c.mode, c.K, c.B, c.gap_ns, c.bursts, c.threads, c.store_bytes) == ("host", "periodic", 132, 32768, 2000.0, 64, 256, 16)
    assert c.extra == {} and c.schedule is None
    r = d.records.to_pandas()
    assert len(r) == 132 * 64 * 2
    assert set(r["kind"].astype(str)) == {"begin", "end"}
    assert (r[r["kind"] == "end"]["payload"] == 32768).all()
    # clock64 → ns per SM from the anchors: the H200 runs at ~1.98 GHz under load.
    npc = d.slices.column("ns_per_cycle").to_numpy()
    assert np.all(np.abs(npc - 0.505) < 0.01)
    # Within a slice, records are in time order and 64 bursts of a 2 µs gap take > 128 µs.
    for _, g in r.groupby("slice"):
        t = g["t_gt_ns"].to_numpy()
        assert np.all(np.diff(t) >= 0)
        assert t[-1] - t[0] > 128_000
    assert d.warnings == []


def test_writer_round_trip(tmp_path):
    raw = np.frombuffer(dump_bytes(DUMP), dtype=np.uint8)
    h, names, slices = read_header(DUMP, raw)
    cap = int(h["capacity"])
    stored = np.minimum(slices["count"], cap)
    rec = raw[int(h["header_bytes"]):].view(RECORD_DTYPE)
    strided = np.zeros(len(slices) * cap, RECORD_DTYPE)
    idx = (np.repeat(np.arange(len(slices)), stored) * cap
           + np.concatenate([np.arange(n) for n in stored]))
    strided[idx] = rec
    out = tmp_path / "rt.xsp"
    write_probe_dump(out, slice_meta=slices, records=strided, capacity=cap, event_names=names,
                     gpu_name="NVIDIA H200", sm_count=132, sm_clock_khz=int(h["sm_clock_khz"]),
                     label=bytes(h["label"]).split(b"\0")[0].decode())
    assert out.read_bytes() == dump_bytes(DUMP)


def _bad(tmp_path, data: bytes):
    p = tmp_path / "bad.xsp"
    p.write_bytes(data)
    with pytest.raises(InputError) as e:
        decode_probe_dump(p)
    msg = e.value.one_line()
    assert "\n" not in msg and str(p) in msg
    return msg


def test_truncated(tmp_path):
    data = dump_bytes(DUMP)
    assert "truncated" in _bad(tmp_path, data[:-100])
    assert "truncated" in _bad(tmp_path, data[:200])
    assert "truncated" in _bad(tmp_path, data[: HEADER_DTYPE.itemsize + 10])


def test_bad_magic_and_version(tmp_path):
    data = bytearray(dump_bytes(DUMP))
    data[0:8] = b"NOTPROBE"
    assert "bad magic" in _bad(tmp_path, bytes(data))
    data = bytearray(dump_bytes(DUMP))
    data[8:10] = (7).to_bytes(2, "little")
    assert "version 7" in _bad(tmp_path, bytes(data))


def test_trailing_and_corrupt_records(tmp_path):
    data = dump_bytes(DUMP)
    assert "beyond the last record" in _bad(tmp_path, data + b"\0" * 16)
    raw = bytearray(data)
    hdr_bytes = int(np.frombuffer(data[:448], HEADER_DTYPE)[0]["header_bytes"])
    raw[hdr_bytes + 7] = 0xFF  # kind bits 3 and reserved bits set
    assert "corrupt" in _bad(tmp_path, bytes(raw))


def test_corrupt_header_tables(tmp_path):
    raw = bytearray(dump_bytes(DUMP))
    raw[12:16] = (12345).to_bytes(4, "little")  # header_bytes disagrees with the table sizes
    assert "corrupt" in _bad(tmp_path, bytes(raw))


def test_real_overflowed_buffers():
    dump = CALIB / "overflow" / "host_periodic_K132_B32768_G0.xsp.zst"
    with pytest.raises(InputError) as e:
        decode_probe_dump(dump)
    assert "overflowed" in str(e.value) and "capacity 40" in str(e.value)
    d = decode_probe_dump(dump, allow_overflow=True)
    assert d.records.num_rows == 132 * 40
    assert int(d.slices.column("records_dropped").to_numpy().sum()) == 132 * (128 - 40)
    assert any("overflowed" in w for w in d.warnings)


def test_dtypes_match_the_header_layout():
    assert (HEADER_DTYPE.itemsize, SLICE_DTYPE.itemsize, RECORD_DTYPE.itemsize) == (448, 48, 16)
    header = (CALIB.parents[1] / "src" / "xstage_trace" / "instrument" / "include" / "xstage" / "host.hpp").read_text()
    assert 'sizeof(FileHeader) == 448' in header
