"""The probe decoder (collectors/probe_format.py) on dumps built here byte by byte from the layout of
docs/probe-format.md, whose every decoded value is worked out by hand: clock64 → ns per slice from its
anchors (or the nominal clock), the 48-bit clock wrap, record fields, slice and CTA/role numbering,
overflow, warnings (docs/mutation.md)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from xstage_trace.base.errors import InputError
from xstage_trace.collectors.probe_format import (HEADER_DTYPE, RECORD_DTYPE, SLICE_DTYPE, decode_probe_dump, dump_span_gt_ns,
                                                  max_dump_records)

GT0 = 1_764_000_000_000_000_000  # ns: a %globaltimer value of 2025


def _dump_bytes(slices, records_per_slice, *, names=("mainloop", "rs"), capacity=4, khz=2_000_000, roles=1, rank=0, label="",
                device=0, gpu=b"NVIDIA H200", **header):
    """The file: header, event names (32 bytes each), slice table, then each slice's stored records.
    ``label`` and ``names`` may be bytes (not UTF-8); ``header`` sets header fields after the others."""
    sl = np.zeros(len(slices), SLICE_DTYPE)
    for i, s in enumerate(slices):
        for k, v in s.items():
            sl[i][k] = v
    recs = []
    for rs in records_per_slice:
        for clock, event, kind, tile, payload in rs[:capacity]:
            r = np.zeros((), RECORD_DTYPE)
            r["ts_ev"] = (clock & ((1 << 48) - 1)) | (event << 48) | (kind << 56)
            r["tile"], r["payload"] = tile, payload
            recs.append(r.tobytes())
    h = np.zeros((), HEADER_DTYPE)
    h["magic"], h["version"], h["record_bytes"] = b"XSTPROBE", 1, 16
    h["num_slices"], h["roles_per_cta"], h["capacity"], h["num_events"] = len(slices), roles, capacity, len(names)
    h["header_bytes"] = 448 + 32 * len(names) + 48 * len(slices)
    h["sm_count"], h["sm_clock_khz"], h["device_index"], h["rank"] = 132, khz, device, rank
    h["gpu_name"], h["label"] = gpu, label if isinstance(label, bytes) else label.encode()
    for k, v in header.items():
        h[k] = v
    names_raw = np.array([n if isinstance(n, bytes) else n.encode() for n in names], "S32").tobytes()
    return h.tobytes() + names_raw + sl.tobytes() + b"".join(recs)


def _write(path, slices, records_per_slice, **kw):
    path.write_bytes(_dump_bytes(slices, records_per_slice, **kw))
    return path


def _slice(count, *, gt_open, gt_close, clk_open, clk_close, closed=1, smid=7, smid_close=None):
    return {"count": count, "closed": closed, "smid_open": smid, "smid_close": smid if smid_close is None else smid_close,
            "gt_open": gt_open, "clk_open": clk_open, "gt_close": gt_close, "clk_close": clk_close}


def test_times_from_each_slices_anchors_by_hand(tmp_path):
    """Slice 0: 100 µs of globaltimer over 180,000 cycles: 5/9 ns per cycle (1.8 GHz), not the header's
    2 GHz. A record 9,000 cycles after the open anchor is at gt_open + 5,000 ns. Slice 1 runs 10 µs
    (under the 20 µs needed to trust its anchors): the nominal 0.5 ns per cycle."""
    s0 = _slice(2, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=1_000_000, clk_close=1_180_000)
    s1 = _slice(1, gt_open=GT0 + 200_000, gt_close=GT0 + 210_000, clk_open=5_000_000, clk_close=5_020_000, smid=9)
    p = _write(tmp_path / "d.xsp", [s0, s1], [[(1_009_000, 0, 1, 3, 0), (1_018_000, 0, 2, 3, 77)], [(5_004_000, 1, 0, 8, 5)]],
               label="dest=host shape=S1")
    d = decode_probe_dump(p)
    r = d.records.to_pandas()
    assert r["t_gt_ns"].tolist() == [GT0 + 5_000, GT0 + 10_000, GT0 + 200_000 + 2_000]
    assert r["clock"].tolist() == [1_009_000, 1_018_000, 5_004_000]
    assert r["kind"].astype(str).tolist() == ["begin", "end", "mark"] and r["event"].astype(str).tolist() == ["mainloop", "mainloop", "rs"]
    assert r["event_id"].tolist() == [0, 0, 1] and r["tile"].tolist() == [3, 3, 8] and r["payload"].tolist() == [0, 77, 5]
    assert r["slice"].tolist() == [0, 0, 1] and r["sm_id"].tolist() == [7, 7, 9] and r["rank"].tolist() == [0, 0, 0]
    s = d.slices.to_pandas()
    assert s["ns_per_cycle"].tolist() == pytest.approx([100_000 / 180_000, 0.5])
    assert s["records_stored"].tolist() == [2, 1] and s["records_dropped"].tolist() == [0, 0]
    assert any("1 slices ran under 20 µs" in w for w in d.warnings)
    assert dump_span_gt_ns(d.slices) == (GT0, GT0 + 210_000)
    assert d.header["sm_clock_khz"] == 2_000_000 and d.header["gpu_name"] == "NVIDIA H200" and d.header["label"] == "dest=host shape=S1"


def test_the_48_bit_clock_wraps_after_the_anchor(tmp_path):
    """Anchor 2^48 − 1,000 cycles; a record whose low 48 bits read 3,000 is 4,000 cycles later: at the
    nominal 0.5 ns per cycle (a short slice), 2,000 ns after the open anchor; its clock is anchor + 4,000."""
    anchor = (1 << 48) - 1_000 + (5 << 48)  # the upper bits of clock64 are kept in the anchor only
    s0 = _slice(1, gt_open=GT0, gt_close=GT0 + 1_000, clk_open=anchor, clk_close=anchor + 2_000)
    d = decode_probe_dump(_write(tmp_path / "w.xsp", [s0], [[(3_000, 0, 1, 0, 0)]]))
    r = d.records.to_pandas()
    assert r["clock"].tolist() == [anchor + 4_000] and r["t_gt_ns"].tolist() == [GT0 + 2_000]


def test_roles_number_ctas_and_rank_comes_from_the_header_or_the_caller(tmp_path):
    slices = [_slice(1, gt_open=GT0 + i, gt_close=GT0 + 100_000 + i, clk_open=0, clk_close=200_000) for i in range(4)]
    p = _write(tmp_path / "r.xsp", slices, [[(10, 0, 0, i, 0)] for i in range(4)], roles=2, rank=3, label="rank=3", device=1)
    d = decode_probe_dump(p)
    r = d.records.to_pandas()
    assert r["cta"].tolist() == [0, 0, 1, 1] and r["role"].tolist() == [0, 1, 0, 1] and set(r["rank"]) == {3}
    s = d.slices.to_pandas()
    assert s["cta"].tolist() == [0, 0, 1, 1] and s["role"].tolist() == [0, 1, 0, 1]
    assert d.header["rank"] == 3 and d.header["device_index"] == 1 and d.header["roles_per_cta"] == 2
    assert set(decode_probe_dump(p, rank=5).records.to_pandas()["rank"]) == {5}
    with pytest.raises(InputError, match="label says rank=1 but the header says rank 3"):
        decode_probe_dump(_write(tmp_path / "r2.xsp", slices, [[(10, 0, 0, i, 0)] for i in range(4)], roles=2, rank=3, label="rank=1"))


def test_overflow_is_refused_or_counted(tmp_path):
    s0 = _slice(6, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)
    s1 = _slice(2, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)
    p = _write(tmp_path / "o.xsp", [s0, s1], [[(i, 0, 0, i, 0) for i in range(6)], [(1, 0, 0, 0, 0), (2, 0, 0, 1, 0)]], capacity=4)
    with pytest.raises(InputError, match=r"probe buffer overflowed: 2 records dropped in 1 of 2 slices \(capacity 4 records per slice\)"):
        decode_probe_dump(p)
    d = decode_probe_dump(p, allow_overflow=True)
    assert d.slices.to_pandas()["records_stored"].tolist() == [4, 2] and d.slices.to_pandas()["records_dropped"].tolist() == [2, 0]
    assert d.records.num_rows == 6 and d.records.to_pandas()["tile"].tolist() == [0, 1, 2, 3, 0, 1]
    assert any("probe buffer overflowed" in w for w in d.warnings)
    assert decode_probe_dump(p, allow_overflow=True, records=False).records.num_rows == 0


def test_implausible_and_unclosed_anchors_fall_back_to_the_nominal_clock(tmp_path):
    """Anchors implying 50 MHz (100 µs over 5,000 cycles) are outside 100 MHz–10 GHz: nominal 0.5 ns;
    an unclosed slice: nominal too, with its own warning; a slice that moved SM is reported."""
    bad = _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=5_000)
    moved = _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000, smid=1, smid_close=2)
    d = decode_probe_dump(_write(tmp_path / "i.xsp", [bad, moved], [[(1_000, 0, 0, 0, 0)], [(1_000, 0, 0, 0, 0)]]))
    assert d.slices.to_pandas()["ns_per_cycle"].tolist() == pytest.approx([0.5, 0.5])
    assert d.records.to_pandas()["t_gt_ns"].tolist() == [GT0 + 500, GT0 + 500]
    assert any("1 slices have anchors implying a clock outside 100-10000 MHz" in w for w in d.warnings)
    assert any("1 slices changed SM between open and close" in w for w in d.warnings)
    unclosed = _slice(1, gt_open=GT0, gt_close=0, clk_open=0, clk_close=0, closed=0)
    d = decode_probe_dump(_write(tmp_path / "u.xsp", [unclosed], [[(1_000, 0, 0, 0, 0)]]))
    assert d.slices.to_pandas()["ns_per_cycle"].tolist() == [0.5]
    assert any("1 slices were never closed" in w for w in d.warnings)


def test_anchor_rate_limits_are_inclusive(tmp_path):
    """Exactly 10 GHz (100 µs over 1,000,000 cycles: 0.1 ns per cycle) and exactly 20 µs of span are used."""
    fast = _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=1_000_000)
    short = _slice(1, gt_open=GT0, gt_close=GT0 + 20_000, clk_open=0, clk_close=25_000)  # 0.8 ns per cycle
    d = decode_probe_dump(_write(tmp_path / "l.xsp", [fast, short], [[(10, 0, 0, 0, 0)], [(10, 0, 0, 0, 0)]]))
    assert d.slices.to_pandas()["ns_per_cycle"].tolist() == pytest.approx([0.1, 0.8])
    assert not d.warnings


def test_header_clock_and_corrupt_records_are_refused(tmp_path):
    s0 = _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)
    with pytest.raises(InputError, match=r"SM clock 99999 kHz is outside 100000-10000000 kHz"):
        decode_probe_dump(_write(tmp_path / "k.xsp", [s0], [[(1, 0, 0, 0, 0)]], khz=99_999))
    assert decode_probe_dump(_write(tmp_path / "k2.xsp", [s0], [[(1, 0, 0, 0, 0)]], khz=100_000)).header["sm_clock_khz"] == 100_000
    with pytest.raises(InputError, match=r"1 records with unknown event or kind"):
        decode_probe_dump(_write(tmp_path / "e.xsp", [s0], [[(1, 2, 0, 0, 0)]]))  # event 2 of 2 names
    with pytest.raises(InputError, match=r"1 records with unknown event or kind"):
        decode_probe_dump(_write(tmp_path / "k3.xsp", [s0], [[(1, 0, 3, 0, 0)]]))  # kind 3
    assert decode_probe_dump(_write(tmp_path / "ok.xsp", [s0], [[(1, 1, 2, 0, 0)]])).records.num_rows == 1  # the largest valid ones


def test_record_limit(tmp_path, monkeypatch):
    s0 = _slice(3, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)
    p = _write(tmp_path / "n.xsp", [s0], [[(i, 0, 0, i, 0) for i in range(3)]])
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", "3")
    assert max_dump_records() == 3 and decode_probe_dump(p).records.num_rows == 3
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", "2")
    with pytest.raises(InputError, match=r"dump holds 3 records, more than the 2 one dump may hold"):
        decode_probe_dump(p)
    for bad in ("0", "-4", "many"):
        monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", bad)
        with pytest.raises(InputError, match="is not a positive integer"):
            max_dump_records()
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", " ")
    assert max_dump_records() == 4 << 20


# --- every refusal names the file, the problem (with the numbers the bytes give) and the fix -------------------

REGEN = "re-run the instrumented program to write a fresh dump"
RECOPY = "copy the whole file again or re-run the instrumented program"
GOOD = _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)


def _refusal(path, **kw) -> InputError:
    with pytest.raises(InputError) as e:
        decode_probe_dump(path, **kw)
    assert e.value.path == str(path)
    return e.value


def _zst(path, data: bytes, *, declare_size=True):
    """``data`` as one zstd frame: pyarrow's one-shot codec declares the content size, its stream does not."""
    if declare_size:
        path.write_bytes(pa.Codec("zstd").compress(data, asbytes=True))
    else:
        with pa.output_stream(str(path), compression="zstd") as fh:
            fh.write(data)
    return path


def test_header_refusals_name_the_field_and_the_fix(tmp_path):
    e = _refusal(_write(tmp_path / "m.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], magic=b"NOTPROBE"))
    assert (e.problem, e.fix) == ("not an xstage probe dump (bad magic)", "pass a .xsp file written by xstage/host.hpp or ProbeBuffer.dump")
    e = _refusal(_write(tmp_path / "v.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], version=2))
    assert (e.problem, e.fix) == ("probe dump format version 2 is not supported (this xstage-trace reads 1)",
                                  "use the xstage-trace release that matches the probe header that wrote it")
    e = _refusal(_write(tmp_path / "r.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], record_bytes=32))
    assert (e.problem, e.fix) == ("corrupt probe dump header (record size 32, expected 16)", REGEN)
    e = _refusal(_write(tmp_path / "h.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], header_bytes=448 + 64 + 48 + 16))
    assert (e.problem, e.fix) == ("corrupt probe dump header (table sizes disagree)", REGEN)
    e = _refusal(_write(tmp_path / "k.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], khz=10_000_001))
    assert (e.problem, e.fix) == ("corrupt probe dump header (SM clock 10000001 kHz is outside 100000-10000000 kHz)", REGEN)


def test_header_counts_must_fit_31_bits(tmp_path):
    e = _refusal(_write(tmp_path / "s.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], sm_count=1 << 31))
    assert (e.problem, e.fix) == ("corrupt probe dump header (sm_count 2147483648)", REGEN)
    assert decode_probe_dump(_write(tmp_path / "t.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], sm_count=(1 << 31) - 1)).header["sm_count"] == (1 << 31) - 1


def test_the_header_clock_limit_10_ghz_is_admitted(tmp_path):
    assert decode_probe_dump(_write(tmp_path / "k.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], khz=10_000_000)).header["sm_clock_khz"] == 10_000_000


def test_256_event_names_are_admitted_and_257_refused(tmp_path):
    names = [f"e{i}" for i in range(256)]
    d = decode_probe_dump(_write(tmp_path / "a.xsp", [GOOD], [[(1, 255, 0, 0, 0)]], names=names))
    assert d.event_names == names and d.records.to_pandas()["event"].astype(str).tolist() == ["e255"]
    e = _refusal(_write(tmp_path / "b.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], names=names + ["e256"]))
    assert (e.problem, e.fix) == ("corrupt probe dump header (table sizes disagree)", REGEN)


def test_a_header_alone_holds_no_slices(tmp_path):
    """448 bytes: a whole header with no events and no slices (the file is not truncated)."""
    p = _write(tmp_path / "e.xsp", [], [], names=())
    assert p.stat().st_size == 448
    e = _refusal(p)
    assert (e.problem, e.fix) == ("holds no probe slices (no CTA opened one)",
                                  "re-run the instrumented program with the probes compiled in (-DXSTAGE_TRACE), or leave this dump out")


def test_short_and_long_files_are_refused_with_their_byte_counts(tmp_path):
    """One slice of 2 records: 448 + 2·32 + 48 = 560 header bytes, 592 in all."""
    data = _dump_bytes([_slice(2, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)], [[(1, 0, 0, 0, 0), (2, 0, 0, 0, 0)]])
    assert len(data) == 592
    (tmp_path / "s.xsp").write_bytes(data[:580])
    e = _refusal(tmp_path / "s.xsp")
    assert (e.problem, e.fix) == ("truncated probe dump (580 of 592 bytes)", RECOPY)
    (tmp_path / "l.xsp").write_bytes(data + b"\0" * 48)
    e = _refusal(tmp_path / "l.xsp")
    assert (e.problem, e.fix) == ("corrupt probe dump (48 bytes beyond the last record)", REGEN)
    (tmp_path / "h.xsp").write_bytes(data[:200])
    e = _refusal(tmp_path / "h.xsp", records=False)
    assert (e.problem, e.fix) == ("truncated probe dump (200 bytes)", RECOPY)
    (tmp_path / "z.xsp").write_bytes(b"")
    assert _refusal(tmp_path / "z.xsp").problem == "truncated probe dump (0 bytes, the header alone is 448)"


def test_unknown_events_overflow_label_and_rank_refusals_name_the_fix(tmp_path):
    e = _refusal(_write(tmp_path / "e.xsp", [GOOD], [[(1, 2, 0, 0, 0)]]))
    assert (e.problem, e.fix) == ("corrupt probe dump (1 records with unknown event or kind)",
                                  "re-run the instrumented program; check that it registers every event id it uses")
    one_over = _slice(5, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)  # 5 attempted, 4 kept
    e = _refusal(_write(tmp_path / "o.xsp", [one_over, GOOD], [[(i, 0, 0, 0, 0) for i in range(5)], [(1, 0, 0, 0, 0)]]))
    assert (e.problem, e.fix) == ("probe buffer overflowed: 1 records dropped in 1 of 2 slices (capacity 4 records per slice)",
                                  "raise the capacity passed to HostBuffer/ProbeBuffer, or pass --allow-overflow to analyze what was kept")
    e = _refusal(_write(tmp_path / "b.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], label="K=many"))
    assert e.problem.startswith("bad run configuration in the dump label: ") and "K" in e.problem
    assert e.fix == "write key=value words into the label (docs/probe-format.md, section Label)"
    e = _refusal(_write(tmp_path / "r.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], rank=2, label="rank=1"))
    assert e.fix == "pass the same rank to HostBuffer/ProbeBuffer and to the label"


def test_the_record_limit_messages_name_the_memory_and_the_setting(tmp_path, monkeypatch):
    """5,000,000 records over the default limit of 4 Mi; 5e6 × 210 bytes = 1.05 GB, printed as 1.1. The plain
    dump is a sparse file of its full size (448 + 32·2 + 48 + 16·5e6 bytes): refused before a record is read."""
    monkeypatch.delenv("XSTAGE_MAX_DUMP_RECORDS", raising=False)
    big = _slice(5_000_000, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)
    tables = _dump_bytes([big], [[]], capacity=5_000_000)
    problem = "dump holds 5000000 records, more than the 4194304 one dump may hold (analysis needs about 1.1 GB of memory)"
    fix = "set XSTAGE_MAX_DUMP_RECORDS=5000000 if this machine has the memory, or capture fewer records (smaller capacity or fewer slices)"
    e = _refusal(_zst(tmp_path / "b.xsp.zst", tables))
    assert (e.problem, e.fix) == (problem, fix)
    p = tmp_path / "b.xsp"
    with open(p, "wb") as fh:
        fh.write(tables)
        fh.truncate(len(tables) + 16 * 5_000_000)
    e = _refusal(p)
    assert (e.problem, e.fix) == (problem, fix)
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", "many")
    with pytest.raises(InputError) as e:
        max_dump_records()
    assert e.value.fix == "set it to a record count, e.g. XSTAGE_MAX_DUMP_RECORDS=4194304"


def test_a_read_error_names_the_os_reason(tmp_path, monkeypatch):
    import errno

    from xstage_trace.collectors import probe_format

    p = _write(tmp_path / "p.xsp", [GOOD], [[(1, 0, 0, 0, 0)]])

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(probe_format, "open", refuse, raising=False)  # the module's open(), not the test's
    e = _refusal(p)
    assert (e.problem, e.fix) == ("cannot read probe dump (Permission denied)", "check the path and its permissions")


# --- anchors at the edges of the rules of docs/probe-format.md -------------------------------------------------


def test_anchor_edges_use_the_nominal_clock_or_the_measured_one(tmp_path):
    """Per slice, 100 µs (or 20 µs) of globaltimer over: 10,000 cycles = exactly 10 ns per cycle (100 MHz, the
    lower limit: used); 1 cycle (10^5 ns per cycle: implausible); 0 cycles (no rate: nominal, not implausible);
    20 µs over 1,000 cycles = 20 ns per cycle (50 MHz: implausible, at exactly the shortest trusted span);
    opened at globaltimer 0 (never opened: nominal). Nominal: 0.5 ns per cycle. The two implausible slices are
    reported as such, the other two fallbacks (0 cycles, never opened) as having no clock rate, not as short."""
    s = [
        _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=10_000),
        _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=1),
        _slice(1, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=50, clk_close=50),
        _slice(1, gt_open=GT0, gt_close=GT0 + 20_000, clk_open=0, clk_close=1_000),
        _slice(1, gt_open=0, gt_close=100_000, clk_open=0, clk_close=180_000),
    ]
    d = decode_probe_dump(_write(tmp_path / "a.xsp", s, [[(100, 0, 0, 0, 0)]] * 5))
    assert d.slices.to_pandas()["ns_per_cycle"].tolist() == pytest.approx([10.0, 0.5, 0.5, 0.5, 0.5])
    assert d.records.to_pandas()["t_gt_ns"].tolist() == [GT0 + 1_000, GT0 + 50, GT0 + 25, GT0 + 50, 50]
    assert d.warnings == ["a.xsp: 2 slices ran under 20 µs or have anchors that give no clock rate; their clock64→ns uses the nominal SM clock",
                          "a.xsp: 2 slices have anchors implying a clock outside 100-10000 MHz; their times use the nominal SM clock"]


def test_warnings_count_only_slices_that_hold_records(tmp_path):
    """Two trusted slices with records, one short slice with a record, one short and one unclosed slice without."""
    short = _slice(1, gt_open=GT0, gt_close=GT0 + 1_000, clk_open=0, clk_close=2_000)
    empty_short = _slice(0, gt_open=GT0, gt_close=GT0 + 1_000, clk_open=0, clk_close=2_000)
    empty_open = _slice(0, gt_open=GT0, gt_close=0, clk_open=0, clk_close=0, closed=0)
    d = decode_probe_dump(_write(tmp_path / "w.xsp", [GOOD, GOOD, short, empty_short, empty_open],
                                 [[(1, 0, 0, 0, 0)], [(1, 0, 0, 0, 0)], [(1, 0, 0, 0, 0)], [], []]))
    assert d.warnings == ["w.xsp: 1 slices ran under 20 µs or have anchors that give no clock rate; their clock64→ns uses the nominal SM clock"]
    unclosed = _slice(1, gt_open=GT0, gt_close=0, clk_open=0, clk_close=0, closed=0)
    d = decode_probe_dump(_write(tmp_path / "u.xsp", [GOOD, unclosed, empty_open], [[(1, 0, 0, 0, 0)], [(1, 0, 0, 0, 0)], []]))
    assert d.warnings == ["u.xsp: 1 slices were never closed (kernel exited early?); their times use the nominal SM clock"]


def test_epoch_times_and_anchor_clocks_keep_every_bit(tmp_path):
    """Odd epoch ns (not float64-representable near 1.76e18) and an open anchor above 2^60: the slice table's
    times and each record's clock are the integers in the file; a record 10 cycles after the anchor at the
    nominal 0.5 ns per cycle is at gt_open + 5."""
    anchor = (1 << 60) + 12_345
    s0 = _slice(1, gt_open=GT0 + 1, gt_close=GT0 + 3, clk_open=anchor, clk_close=anchor + 4)
    d = decode_probe_dump(_write(tmp_path / "b.xsp", [s0], [[(anchor + 10, 0, 1, 0, 0)]]))
    s = d.slices.to_pandas()
    assert s["open_gt_ns"].tolist() == [GT0 + 1] and s["close_gt_ns"].tolist() == [GT0 + 3]
    r = d.records.to_pandas()
    assert r["clock"].tolist() == [anchor + 10] and r["t_gt_ns"].tolist() == [GT0 + 6]


# --- header fields, names, label --------------------------------------------------------------------------------


def test_text_fields_end_at_the_first_nul_and_bad_utf8_is_replaced(tmp_path):
    """A C writer may leave stale bytes after a field's terminating NUL; bytes that are not UTF-8 become U+FFFD."""
    d = decode_probe_dump(_write(tmp_path / "t.xsp", [GOOD], [[(1, 1, 0, 0, 0)]], names=(b"main\xffloop", b"rs"),
                                 label=b"dest=host note=\xff\0stale\0bytes", gpu=b"H\xff200\0old\0name"))
    assert d.event_names == ["main\ufffdloop", "rs"]
    assert d.header["label"] == "dest=host note=\ufffd" and d.config.extra == {"note": "\ufffd"}
    assert d.header["gpu_name"] == "H\ufffd200"
    assert d.slices.to_pandas()["label"].tolist() == ["dest=host note=\ufffd"]


def test_the_header_dict_and_the_dump_fields(tmp_path):
    p = _write(tmp_path / "f.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], capacity=3, names=("a", "b", "c"))
    d = decode_probe_dump(p)
    assert d.path == p and d.event_names == ["a", "b", "c"]
    assert (d.header["capacity"], d.header["version"], d.header["num_slices"]) == (3, 1, 1)


def test_cta_and_role_when_the_header_says_zero_or_one_role(tmp_path):
    """roles_per_cta 0 is read as 1: each slice is its own CTA, role 0."""
    slices = [GOOD, GOOD, GOOD]
    for roles in (0, 1):
        d = decode_probe_dump(_write(tmp_path / f"r{roles}.xsp", slices, [[(1, 0, 0, i, 0)] for i in range(3)], roles=roles))
        r, s = d.records.to_pandas(), d.slices.to_pandas()
        assert r["cta"].tolist() == [0, 1, 2] and r["role"].tolist() == [0, 0, 0]
        assert s["cta"].tolist() == [0, 1, 2] and s["role"].tolist() == [0, 0, 0] and d.header["roles_per_cta"] == 1


def test_rank_one_is_written_into_every_record(tmp_path):
    d = decode_probe_dump(_write(tmp_path / "r.xsp", [GOOD, GOOD], [[(1, 0, 0, 0, 0)], [(2, 0, 0, 0, 0)]], rank=1))
    assert d.records.to_pandas()["rank"].tolist() == [1, 1] and d.slices.to_pandas()["rank"].tolist() == [1, 1]


def test_dumps_row_holds_the_header_and_the_label_fields(tmp_path):
    """The rank is the header's even where the label does not name one."""
    p = _write(tmp_path / "row.xsp", [GOOD], [[(1, 0, 0, 0, 0)]], rank=2, device=3, label="dest=host K=4", gpu=b"NVIDIA H200")
    d = decode_probe_dump(p)
    row = d.dumps_row()
    assert (row["rank"], row["dump"], row["device_index"], row["gpu_name"], row["sm_count"], row["label"], row["kernel_index"]) == (
        2, "row.xsp", 3, "NVIDIA H200", 132, "dest=host K=4", None)
    assert row["dest"] == "host" and row["K"] == 4


def test_probe_dump_names():
    from xstage_trace.collectors.probe_format import is_probe_dump_name

    assert [is_probe_dump_name(n) for n in ("a.xsp", "A.XSP", "a.xsp.zst", "a.XSP.ZST", "a.xsp.gz", "a.zst", "xsp")] == [
        True, True, True, True, False, False, False]


def test_the_dump_span_uses_slices_with_records_and_their_closes(tmp_path):
    """Used slices open at +100 and +200, the first closes at +1,000, the second is unclosed (close field
    +9,000); an empty slice opens earlier (+0) and closes later (+5,000). Span: +100 to +1,000. With no
    closed slice among the used ones, the last close field of those counts (+9,000); with no used slice,
    every slice counts."""
    used = _slice(1, gt_open=GT0 + 100, gt_close=GT0 + 1_000, clk_open=0, clk_close=0)
    unclosed = _slice(1, gt_open=GT0 + 200, gt_close=GT0 + 9_000, clk_open=0, clk_close=0, closed=0)
    empty = _slice(0, gt_open=GT0, gt_close=GT0 + 5_000, clk_open=0, clk_close=0)
    d = decode_probe_dump(_write(tmp_path / "s.xsp", [used, unclosed, empty], [[(1, 0, 0, 0, 0)], [(1, 0, 0, 0, 0)], []]))
    assert dump_span_gt_ns(d.slices) == (GT0 + 100, GT0 + 1_000) and d.span_gt_ns == (GT0 + 100, GT0 + 1_000)
    d = decode_probe_dump(_write(tmp_path / "u.xsp", [unclosed, empty], [[(1, 0, 0, 0, 0)], []]))
    assert d.span_gt_ns == (GT0 + 200, GT0 + 9_000)
    d = decode_probe_dump(_write(tmp_path / "e.xsp", [empty, _slice(0, gt_open=GT0 + 50, gt_close=GT0 + 7_000, clk_open=0, clk_close=0)], [[], []]))
    assert d.records.num_rows == 0 and d.span_gt_ns == (GT0, GT0 + 7_000)


# --- how the bytes are read: compressed, header only, memory-mapped ---------------------------------------------

TWO = [_slice(2, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000), GOOD]
TWO_RECORDS = [[(10, 0, 1, 5, 6), (20, 0, 2, 5, 7)], [(30, 1, 0, 9, 8)]]


def _same_dump(a, b):
    """The same tables but for the file name."""
    assert a.records.drop_columns(["dump"]).equals(b.records.drop_columns(["dump"]))
    assert a.slices.drop_columns(["dump"]).equals(b.slices.drop_columns(["dump"]))
    assert a.header == b.header and a.event_names == b.event_names


def test_a_zstd_frame_is_decoded_by_its_magic_whatever_its_name(tmp_path):
    data = _dump_bytes(TWO, TWO_RECORDS, label="dest=host")
    plain = decode_probe_dump(_write(tmp_path / "d.xsp", TWO, TWO_RECORDS, label="dest=host"))
    assert plain.records.to_pandas()["tile"].tolist() == [5, 5, 9]
    for name, declare in (("c.xsp", True), ("c.xsp.zst", True), ("s.xsp", False), ("s.bin", False)):
        _same_dump(decode_probe_dump(_zst(tmp_path / name, data, declare_size=declare)), plain)


def test_the_first_bytes_of_a_dump_plain_or_compressed(tmp_path):
    """2 event names and 2 slices: the tables are 448 + 64 + 96 = 608 bytes."""
    from xstage_trace.collectors.probe_format import read_dump_bytes

    data = _dump_bytes(TWO, TWO_RECORDS)
    (tmp_path / "d.xsp").write_bytes(data)
    _zst(tmp_path / "d.xsp.zst", data)
    for limit in (100, 448, 500, 608):
        for p in (tmp_path / "d.xsp", tmp_path / "d.xsp.zst"):
            assert read_dump_bytes(p, limit).tobytes() == data[:limit], (p.name, limit)
    assert read_dump_bytes(tmp_path / "d.xsp.zst").tobytes() == data
    full = decode_probe_dump(tmp_path / "d.xsp.zst")
    head = decode_probe_dump(tmp_path / "d.xsp.zst", records=False)
    assert head.slices.equals(full.slices) and head.header == full.header and head.records.num_rows == 0


def test_a_header_only_decode_reads_nothing_past_the_slice_table(tmp_path):
    """Junk after the last record: the full decode refuses it; the header-only one never reads that far."""
    data = _dump_bytes(TWO, TWO_RECORDS) + b"\1" * 16
    (tmp_path / "j.xsp").write_bytes(data)
    _zst(tmp_path / "j.xsp.zst", data, declare_size=False)  # no declared size: the junk is found as the frame is read
    for p, problem in ((tmp_path / "j.xsp", "corrupt probe dump (16 bytes beyond the last record)"),
                       (tmp_path / "j.xsp.zst", "corrupt probe dump (bytes beyond the last record)")):
        assert decode_probe_dump(p, records=False).slices.num_rows == 2
        e = _refusal(p)
        assert (e.problem, e.fix) == (problem, REGEN)


def test_a_compressed_dump_whose_frame_size_disagrees_with_its_header(tmp_path):
    """The header says 608 + 3·16 = 656 bytes; the frame declares 672 (16 more)."""
    e = _refusal(_zst(tmp_path / "x.xsp.zst", _dump_bytes(TWO, TWO_RECORDS) + b"\0" * 16))
    assert (e.problem, e.fix) == ("corrupt probe dump (its zstd frame declares 672 bytes, its header 656)", REGEN)


def test_bad_compressed_dumps_are_named_like_plain_ones(tmp_path):
    data = _dump_bytes(TWO, TWO_RECORDS)
    e = _refusal(_zst(tmp_path / "h.xsp.zst", data[:200]))
    assert e.problem == "truncated probe dump (200 bytes, the header alone is 448)"
    e = _refusal(_zst(tmp_path / "t.xsp.zst", data[:460]))
    assert e.problem == "truncated probe dump (460 of at least 608 header bytes)"
    e = _refusal(_zst(tmp_path / "m.xsp.zst", b"NOTPROBE" + data[8:]))
    assert e.problem == "not an xstage probe dump (bad magic)"
    (tmp_path / "g.xsp.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\x07" * 40)
    e = _refusal(tmp_path / "g.xsp.zst")
    assert e.problem.startswith("corrupt zstd-compressed probe dump (")
    assert e.fix == "copy the whole file again or decompress it with zstd -d and pass the .xsp"


def test_compressed_header_limits_events_and_slices(tmp_path, monkeypatch):
    """In a compressed dump the table sizes are checked before they are read: 256 event names are admitted,
    257 refused; with a limit of 2 records, 2 slices are admitted and 3 (even empty ones) refused; a dump of
    exactly the limit's records is admitted."""
    names = [f"e{i}" for i in range(256)]
    d = decode_probe_dump(_zst(tmp_path / "a.xsp.zst", _dump_bytes([GOOD], [[(1, 255, 0, 0, 0)]], names=names)))
    assert d.records.to_pandas()["event"].astype(str).tolist() == ["e255"]
    e = _refusal(_zst(tmp_path / "b.xsp.zst", _dump_bytes([GOOD], [[(1, 0, 0, 0, 0)]], names=names + ["e256"])))
    assert (e.problem, e.fix) == ("corrupt probe dump header (257 events, 1 slices)", REGEN)
    monkeypatch.setenv("XSTAGE_MAX_DUMP_RECORDS", "2")
    assert decode_probe_dump(_zst(tmp_path / "c.xsp.zst", _dump_bytes([GOOD, GOOD], [[(1, 0, 0, 0, 0)], [(2, 0, 0, 0, 0)]]))).records.num_rows == 2
    empty = _slice(0, gt_open=GT0, gt_close=GT0 + 100_000, clk_open=0, clk_close=200_000)
    e = _refusal(_zst(tmp_path / "d.xsp.zst", _dump_bytes([empty] * 3, [[]] * 3)))
    assert (e.problem, e.fix) == ("corrupt probe dump header (2 events, 3 slices)", REGEN)


def test_plain_dumps_of_8_mib_and_more_are_mapped_read_only(tmp_path):
    from xstage_trace.collectors.probe_format import read_dump_bytes

    for size, mapped in ((8 << 20, True), ((8 << 20) - 1, False)):
        p = tmp_path / f"{size}.xsp"
        with open(p, "wb") as fh:
            fh.truncate(size)
        raw = read_dump_bytes(p)
        assert isinstance(raw, np.memmap) == mapped and raw.dtype == np.uint8 and raw.size == size
        assert not (mapped and raw.flags.writeable)


# --- a dump of 2^20 records: decoded in two halves on two threads ------------------------------------------------

BIG_COUNTS = np.array([300_000, 200_000, 348_576, 200_000])  # 2^20 records; the halves split after slice 1
BIG_CLK_OPEN = [1_000, 5 << 40, (1 << 60) + 12_345, (8 << 48) - 8_000]  # slice 3's low 48 bits wrap after 1,000 records


def _big_dump(path, bad=()):
    """Record i of slice s: 8·i cycles after the open anchor, event i mod 2, kind i mod 3, tile 10^6·s + i,
    payload 7·i + s. Each slice spans 8·count cycles over 5·count ns of globaltimer: 0.625 ns per cycle, so
    record i is at gt_open + 5·i exactly. ``bad``: (record, byte 6 or 7, value) to corrupt."""
    n = int(BIG_COUNTS.sum())
    s = np.repeat(np.arange(4), BIG_COUNTS)
    i = np.arange(n) - np.repeat(np.cumsum(BIG_COUNTS) - BIG_COUNTS, BIG_COUNTS)
    gt_open = [GT0 + 1 + k * 1_000_000_000 for k in range(4)]
    slices = [_slice(int(c), gt_open=g, gt_close=g + 5 * int(c), clk_open=a, clk_close=a + 8 * int(c), smid=3 + 2 * k)
              for k, (c, g, a) in enumerate(zip(BIG_COUNTS, gt_open, BIG_CLK_OPEN))]
    clock = np.array(BIG_CLK_OPEN, dtype=np.uint64)[s] + (8 * i).astype(np.uint64)
    rec = np.zeros(n, RECORD_DTYPE)
    rec["ts_ev"] = (clock & np.uint64((1 << 48) - 1)) | ((i % 2).astype(np.uint64) << 48) | ((i % 3).astype(np.uint64) << 56)
    rec["tile"], rec["payload"] = 1_000_000 * s + i, 7 * i + s
    raw = rec.view(np.uint8).reshape(n, 16)
    for k, byte, value in bad:
        raw[k, byte] = value
    path.write_bytes(_dump_bytes(slices, [[]] * 4, capacity=int(BIG_COUNTS.max())) + rec.tobytes())
    return path, dict(slice=s, clock=clock.astype(np.int64), t_gt_ns=np.array(gt_open, dtype=np.int64)[s] + 5 * i,
                      event_id=i % 2, kind=i % 3, tile=1_000_000 * s + i, payload=7 * i + s, sm_id=3 + 2 * s)


def test_a_dump_of_2_20_records_decodes_every_field_by_hand(tmp_path):
    p, want = _big_dump(tmp_path / "big.xsp")
    d = decode_probe_dump(p)
    r = d.records
    assert r.num_rows == 1 << 20 and not d.warnings
    for name, values in want.items():
        got = r[name].combine_chunks().indices.to_numpy() if name == "kind" else r[name].to_numpy()
        assert np.array_equal(got, values), name
    assert d.slices.to_pandas()["ns_per_cycle"].tolist() == [0.625] * 4


def test_corrupt_records_in_both_halves_of_a_2_20_record_dump_are_all_counted(tmp_path):
    """Kind 3 in the first record (first half), event 2 (of 2 names) in the last two (second half)."""
    n = 1 << 20
    p, _ = _big_dump(tmp_path / "bad.xsp", bad=[(0, 7, 3), (n - 1, 6, 2), (n - 2, 6, 2)])
    e = _refusal(p)
    assert e.problem == "corrupt probe dump (3 records with unknown event or kind)"
