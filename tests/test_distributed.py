"""Per-dump work on Dask distributed (issue 15): a LocalCluster of worker processes gives the same
results as the in-process map, for decoding and reducing every real fused-kernel dump."""

from __future__ import annotations

import sys
from pathlib import Path

import cloudpickle
import pyarrow.compute as pc
import pytest

from conftest import FUSED
from xstage_trace.base.errors import InputError
from xstage_trace.pipeline.distributed import local_workers, map_dumps
from xstage_trace.collectors.probe_format import decode_probe_dump

# the workers import this module's functions by value (tests/ is not an installed package)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def reduce_dump(path: Path) -> dict:
    """Decode one dump and reduce it: records, and per event name the count, payload sum,
    clock sum and first/last %globaltimer."""
    import pyarrow as pa

    d = decode_probe_dump(path)
    r = d.records.select(["event", "payload", "clock", "t_gt_ns"])
    r = r.set_column(0, "event", r["event"].cast(pa.string())).set_column(1, "payload", r["payload"].cast(pa.int64()))
    g = r.group_by("event").aggregate([("payload", "count"), ("payload", "sum"), ("clock", "sum"), ("t_gt_ns", "min"), ("t_gt_ns", "max")])
    per_event = {row.pop("event"): row for row in g.to_pylist()}
    return {"dump": path.name, "records": d.records.num_rows, "per_event": dict(sorted(per_event.items())),
            "payload_sum": pc.sum(r["payload"]).as_py()}


def worker_pid(path: Path) -> int:
    import os

    return os.getpid()


@pytest.fixture(scope="module")
def dumps():
    paths = sorted((FUSED / "traced").glob("*.xsp*"))
    assert len(paths) == 8
    return paths


def test_local_cluster_of_two_processes_matches_the_in_process_map(dumps):
    here = map_dumps(reduce_dump, dumps, None)
    there = map_dumps(reduce_dump, dumps, "local:2")
    assert there == here
    assert [r["dump"] for r in there] == [p.name for p in dumps]  # order of the inputs
    # the reduction is not vacuous: 7 records per tile, 7392 tiles per dump (traced PROVENANCE.md: 132 + 176 tiles × 24 rows)
    assert all(r["records"] == 7 * 7392 for r in here)
    assert all(sum(e["payload_count"] for e in r["per_event"].values()) == r["records"] for r in here)


def test_local_cluster_runs_the_work_in_other_processes(dumps):
    import os

    pids = map_dumps(worker_pid, dumps, "local:2")
    assert os.getpid() not in pids and len(set(pids)) == 2


def test_bad_dump_on_a_worker_is_the_same_one_line_error(tmp_path, dumps):
    bad = tmp_path / "truncated.xsp"
    bad.write_bytes(dumps[0].read_bytes()[:300])
    with pytest.raises(InputError) as here:
        map_dumps(reduce_dump, [dumps[0], bad], None)
    with pytest.raises(InputError) as there:
        map_dumps(reduce_dump, [dumps[0], bad], "local:2")
    assert there.value.one_line() == here.value.one_line() and str(bad) in there.value.one_line()


@pytest.mark.parametrize("spec", ["local:", "local:0", "local:two"])
def test_local_needs_a_worker_count(spec):
    with pytest.raises(InputError, match="local:N"):
        local_workers(spec)


def test_unreachable_scheduler_is_an_input_error(dumps, monkeypatch):
    monkeypatch.setattr("xstage_trace.pipeline.distributed.CONNECT_TIMEOUT_S", 2)
    with pytest.raises(InputError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        map_dumps(reduce_dump, dumps[:1], "tcp://127.0.0.1:9")
