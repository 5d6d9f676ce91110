"""Dump-to-report pairing (collectors/pairing.py) on hand-built exports and dumps: which report holds
which (rank, GPU) group, each refusal and its reason, the kernel index of every dump, report ranks
and --rank parsing (docs/mutation.md: the pairing bugs planted for issue 29 went uncaught before)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from xstage_trace.base.errors import InputError
from xstage_trace.collectors.pairing import AlignBounds, Pairing, export_ranks, pair_dumps, parse_rank_overrides

EPOCH = 1_764_000_000_000_000_000  # ns since 1970: too large for float64 to hold exactly


def _export(name: str, kernels: list[tuple[int, int, int]], epoch: int | None = EPOCH):
    dev, start, end = (list(c) for c in zip(*kernels)) if kernels else ([], [], [])
    table = pa.table({"device_id": pa.array(dev, pa.int64()), "start_ns": pa.array(start, pa.int64()), "end_ns": pa.array(end, pa.int64())})
    return SimpleNamespace(path=Path("/caps") / name, utc_epoch_ns=epoch, kernels=table)


def _dump(name: str, rank: int, device: int, start_rel: int, end_rel: int, shift_ns: int = 0):
    """A dump whose %globaltimer span is (start, end) ns after EPOCH on the kernel clock, plus a clock shift."""
    return SimpleNamespace(path=Path("/caps") / name, header={"rank": rank, "device_index": device},
                           span_gt_ns=(EPOCH + start_rel + shift_ns, EPOCH + end_rel + shift_ns))


# GPU 0: kernels at 1, 2, 3 ms; GPU 1: kernels at 1.5, 2.5, 3.5 ms (100 µs each) in one export, rows interleaved
K0 = [(0, 1_000_000 * i, 1_000_000 * i + 100_000) for i in (1, 2, 3)]
K1 = [(1, 1_000_000 * i + 500_000, 1_000_000 * i + 600_000) for i in (1, 2, 3)]
BOTH = [k for pair in zip(K0, K1) for k in pair]  # device rows 0,1,0,1,0,1


def _inside(kernels, rank, device, name, shift_ns=0):
    return [_dump(f"{name}{i}.xsp", rank, device, s + 20_000, e - 20_000, shift_ns) for i, (_, s, e) in enumerate(kernels)]


def test_each_group_goes_to_the_report_that_holds_it_whatever_the_order():
    a, b = _export("rank0.nsys-rep", K0), _export("rank1.nsys-rep", K1)
    dumps = _inside(K0, 0, 0, "r0_") + _inside(K1, 1, 1, "r1_")
    for exports in ([a, b], [b, a]):
        pairs = {(p.rank, p.device): p for p in pair_dumps(exports, dumps)}
        assert sorted(pairs) == [(0, 0), (1, 1)]
        assert exports[pairs[(0, 0)].export_index] is a and exports[pairs[(1, 1)].export_index] is b
        assert pairs[(0, 0)].dump_indices == [0, 1, 2] and pairs[(1, 1)].dump_indices == [3, 4, 5]
        assert all(p.epoch_ns == EPOCH and p.alignment.residual_ns == 0.0 for p in pairs.values())
        assert all(p.alignment.offset_ns == pytest.approx(0.0, abs=1e-3) for p in pairs.values())
    # a group's dumps are listed in input order even when interleaved with another group's
    mixed = [dumps[3], dumps[0], dumps[4], dumps[1]]
    pairs = {(p.rank, p.device): p.dump_indices for p in pair_dumps([a, b], mixed)}
    assert pairs == {(0, 0): [1, 3], (1, 1): [0, 2]}


def test_kernel_of_dump_indexes_the_whole_kernel_table_not_the_gpus_rows():
    e = _export("both.nsys-rep", BOTH)
    (p0, p1) = pair_dumps([e], _inside(K0, 0, 0, "a") + _inside(K1, 0, 1, "b"))
    assert (p0.device, p1.device) == (0, 1)
    assert p0.alignment.kernel_of_dump.tolist() == [0, 2, 4]  # GPU 0's kernels are rows 0, 2, 4 of the export
    assert p1.alignment.kernel_of_dump.tolist() == [1, 3, 5]


def test_refusals_name_their_reasons():
    dumps = _inside(K0, 0, 0, "d")
    cases = {
        "has no session start time (UTC)": _export("noepoch.nsys-rep", K0, epoch=None),
        "traced no kernel on GPU 0": _export("gpu1only.nsys-rep", K1),
        "holds 2 of 3 dumps inside its kernels on GPU 0": _export("two.nsys-rep", K0[:2]),
    }
    for why, export in cases.items():
        with pytest.raises(InputError) as e:
            pair_dumps([export], dumps)
        text = str(e.value)
        assert f"{export.path.name} {why}" in text and "rank 0 on GPU 0" in text and "d0.xsp" in text
    # several reasons at once, one per report, in input order
    with pytest.raises(InputError) as e:
        pair_dumps(list(cases.values()), dumps)
    assert str(e.value).index("noepoch") < str(e.value).index("gpu1only") < str(e.value).index("two.nsys-rep")


@pytest.mark.parametrize("shift_ms", [7, -7])
def test_an_offset_beyond_the_bound_is_refused_either_way(shift_ms):
    dumps = _inside(K0, 0, 0, "d", shift_ns=shift_ms * 1_000_000 + 250_000)  # lands between kernels unless shifted back
    export = _export("cap.nsys-rep", [(0, s + shift_ms * 1_000_000 + 250_000, e + shift_ms * 1_000_000 + 250_000) for _, s, e in K0])
    # the export's own kernels shifted the same way: offset 0 under the default bounds
    assert len(pair_dumps([export], dumps)) == 1
    shifted = _inside(K0, 0, 0, "d", shift_ns=shift_ms * 1_000_000)
    plain = _export("cap.nsys-rep", K0)
    (p,) = pair_dumps([plain], shifted)  # 7 ms is inside the default 50 ms
    assert p.alignment.offset_ns == pytest.approx(shift_ms * 1e6, abs=1.0)
    with pytest.raises(InputError, match=r"fits them only (-)?7\.0 ms off its clock \(a capture allows 5 ms\)"):
        pair_dumps([plain], shifted, AlignBounds(max_offset_ns=5e6))
    assert len(pair_dumps([plain], shifted, AlignBounds(max_offset_ns=7e6))) == 1  # the bound itself is allowed


def test_a_drift_beyond_the_bound_is_refused():
    """Kernels of 1 ms, 100 ms apart; the dumps' clock runs 300 ppm fast: 30 µs more per 100 ms, inside
    the ±300 µs of room each dump has in its kernel."""
    ks = [(0, 100_000_000 * i, 100_000_000 * i + 1_000_000) for i in range(4)]
    dumps = [_dump(f"d{i}.xsp", 0, 0, s + 300_000 + 30_000 * i, e - 300_000 + 30_000 * i) for i, (_, s, e) in enumerate(ks)]
    export = _export("cap.nsys-rep", ks)
    (p,) = pair_dumps([export], dumps, AlignBounds(max_drift_ppm=1000.0))
    assert p.alignment.drift * 1e6 == pytest.approx(300.0, rel=1e-3)  # 30 µs / (100 ms + 30 µs) per probe ns
    with pytest.raises(InputError, match=r"drift of 300 ppm \(a capture allows 200\)"):
        pair_dumps([export], dumps)  # the default bound
    assert len(pair_dumps([export], dumps, AlignBounds(max_drift_ppm=301.0))) == 1


def test_no_single_clock_line_is_refused_with_its_residual():
    ks = [(0, 1_000_000 * i, 1_000_000 * i + 100_000) for i in range(3)]
    dumps = [_dump(f"d{i}.xsp", 0, 0, s + 1_000 + (15_000 if i == 1 else 0), e - 1_000 + (15_000 if i == 1 else 0)) for i, (_, s, e) in enumerate(ks)]
    with pytest.raises(InputError, match=r"no single clock line places them all \(residual 6500 ns, more than the clocks' resolution"):
        pair_dumps([_export("cap.nsys-rep", ks)], dumps)


def test_a_group_that_fits_two_reports_is_ambiguous():
    dumps = _inside(K0, 0, 0, "d")
    with pytest.raises(InputError, match=r"fit in several reports \(a.nsys-rep, b.nsys-rep\)"):
        pair_dumps([_export("a.nsys-rep", K0), _export("b.nsys-rep", K0)], dumps)


def test_bounds_must_be_positive():
    for kw in ({"max_offset_ns": 0.0}, {"max_drift_ppm": 0.0}, {"max_offset_ns": -1.0}):
        with pytest.raises(ValueError):
            AlignBounds(**kw)
    assert AlignBounds().max_offset_ns == 50e6 and AlignBounds().max_drift_ppm == 200.0


def _pairing(rank: int, device: int, export_index: int) -> Pairing:
    return Pairing(rank, device, export_index, [0], None, EPOCH)


def test_export_ranks_by_hand():
    a, b, c = _export("a.nsys-rep", K0), _export("b.nsys-rep", K1), _export("c.nsys-rep", [])
    pairs = [_pairing(0, 0, 0), _pairing(1, 1, 1)]
    assert export_ranks([a, b], pairs, {}) == [{0: 0}, {1: 1}]
    assert export_ranks([a, b], pairs, {"b.nsys-rep": 1}) == [{0: 0}, {1: 1}]  # an override that agrees
    with pytest.raises(InputError, match=r"--rank says 2 but its probe dumps say rank \[1\]"):
        export_ranks([a, b], pairs, {"b.nsys-rep": 2})
    with pytest.raises(InputError, match="--rank says 3"):
        export_ranks([a, b], pairs, {str(b.path): 3})  # by full path too
    # a report without dumps: rank 0 when alone, else it must be named
    assert export_ranks([c], [], {}) == [{-1: 0}]
    assert export_ranks([c], [], {"c.nsys-rep": 4}) == [{-1: 4}]
    with pytest.raises(InputError, match=r"name it: --rank c.nsys-rep=N"):
        export_ranks([a, c], [_pairing(0, 0, 0)], {})
    assert export_ranks([a, c], [_pairing(0, 0, 0)], {"c.nsys-rep": 1}) == [{0: 0}, {-1: 1}]
    assert export_ranks([a, c], [_pairing(0, 0, 0)], {str(c.path): 0}) == [{0: 0}, {-1: 0}]


def test_parse_rank_overrides_by_hand():
    assert parse_rank_overrides(["a.nsys-rep=3", "/x/b.nsys-rep=0"]) == {"a.nsys-rep": 3, "/x/b.nsys-rep": 0}
    assert parse_rank_overrides(["weird=name.nsys-rep=12"]) == {"weird=name.nsys-rep": 12}  # the last '=' splits
    assert parse_rank_overrides([]) == {} and parse_rank_overrides(None) == {}
    for bad in ("a.nsys-rep", "=3", "a.nsys-rep=", "a.nsys-rep=-1", "a.nsys-rep=x"):
        with pytest.raises(InputError, match="is not REPORT=N"):
            parse_rank_overrides([bad])


def test_every_refusal_is_one_input_error_naming_file_problem_and_fix():
    dumps = _inside(K0, 0, 0, "d")
    with pytest.raises(InputError) as e:
        pair_dumps([_export("gpu1.nsys-rep", K1), _export("noepoch.nsys-rep", K0, epoch=None)], dumps)
    err = e.value
    assert err.path == "/caps/d0.xsp"
    assert err.problem == ("no nsys report holds the probe dumps of rank 0 on GPU 0 "
                           "(gpu1.nsys-rep traced no kernel on GPU 0; noepoch.nsys-rep has no session start time (UTC))")
    assert err.fix == "pass the report captured together with these dumps, or the dumps alone to analyze them on the probes' own clock"
    with pytest.raises(InputError) as e:
        pair_dumps([_export("a.nsys-rep", K0), _export("b.nsys-rep", K0)], dumps)
    assert e.value.path == "/caps/d0.xsp" and e.value.fix == "pass only the report captured together with these dumps"
    a, c = _export("a.nsys-rep", K0), _export("c.nsys-rep", [])
    with pytest.raises(InputError) as e:
        export_ranks([a], [_pairing(0, 0, 0)], {"a.nsys-rep": 5})
    assert (e.value.path, e.value.fix) == ("/caps/a.nsys-rep", "drop the --rank for this report or fix it")
    with pytest.raises(InputError) as e:
        export_ranks([a, c], [_pairing(0, 0, 0)], {})
    assert e.value.path == "/caps/c.nsys-rep" and e.value.problem == "holds no probe dumps, so its rank cannot be told from the data"
    with pytest.raises(InputError) as e:
        parse_rank_overrides(["oops"])
    assert e.value.path is None and e.value.problem == "--rank 'oops' is not REPORT=N"
    assert e.value.fix == "write e.g. --rank run_rank1.nsys-rep=1"


def test_the_offset_refusal_reports_ms_to_a_tenth():
    """Shift 7.050001 ms: '7.1 ms off'; the bound 7 ms: 'allows 7 ms' (ns / 10⁶ exactly)."""
    shifted = _inside(K0, 0, 0, "d", shift_ns=7_050_001)
    with pytest.raises(InputError) as e:
        pair_dumps([_export("cap.nsys-rep", K0)], shifted, AlignBounds(max_offset_ns=7e6))
    assert "cap.nsys-rep fits them only 7.1 ms off its clock (a capture allows 7 ms)" in e.value.problem


def test_a_residual_within_the_clocks_resolution_pairs_and_one_beyond_it_is_refused():
    """As in test_no_single_clock_line...: ends ±1 µs, the middle dump late by 2.001 µs (m = (2000 − 2001)/2, a
    residual of 0.5 ns: inside the clocks' tick, it pairs) or by 2.4 µs (a residual of 200 ns: refused)."""
    ks = [(0, 1_000_000 * i, 1_000_000 * i + 100_000) for i in range(3)]

    def dumps(late):
        return [_dump(f"d{i}.xsp", 0, 0, s + 1_000 + (late if i == 1 else 0), e - 1_000 + (late if i == 1 else 0)) for i, (_, s, e) in enumerate(ks)]

    assert len(pair_dumps([_export("cap.nsys-rep", ks)], dumps(2_001))) == 1
    with pytest.raises(InputError, match="no single clock line places them all"):
        pair_dumps([_export("cap.nsys-rep", ks)], dumps(2_400))


def test_bounds_below_one_are_allowed():
    assert AlignBounds(max_offset_ns=0.5, max_drift_ppm=0.5).max_offset_ns == 0.5
    with pytest.raises(ValueError, match="^alignment bounds must be positive$"):
        AlignBounds(max_drift_ppm=-1.0)
