"""The FA4 H200 capture in sample_traces/h200_fa4/ (recipe fa4, sample_traces/h200_fa4/run/bench.py):
every output tile the launch issued is traced once, one CTA at a time on each SM (the converter's
slice-per-SM mapping needs that), the causal Q-loops scale with their K/V blocks, and the probe
builds computed the upstream build's O bit for bit."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from scipy.stats import spearmanr

from conftest import SAMPLES

FA4 = SAMPLES / "h200_fa4"


@pytest.fixture(scope="module")
def fa4_run(tmp_path_factory):
    from xstage_trace import open_run
    from xstage_trace.analysis.piggyback import qloop_tiles
    from xstage_trace.pipeline.runner import analyze_inputs

    assert sorted((FA4 / "dumps").glob("*.xsp*")), "sample_traces/h200_fa4/dumps holds no probe dumps"
    out = tmp_path_factory.mktemp("fa4") / "run"
    analyze_inputs([FA4 / "dumps"], out)
    run = open_run(out)
    return qloop_tiles(run.probes(), run.dumps()), run.dumps(), run.probes()


def test_every_issued_output_tile_is_traced_once_on_at_most_every_sm(fa4_run):
    tiles, dumps, _ = fa4_run
    assert set(tiles["dump"]) == set(dumps["dump"])
    for name, g in tiles.groupby("dump"):
        d = dumps.set_index("dump").loc[name]
        words = dict(w.split("=") for w in d["label"].split())
        batch, heads, seqlen, bm = (int(words[k]) for k in ("batch", "heads", "seqlen", "block_m"))
        issued = {(m, h, b) for m in range(-(-seqlen // bm)) for h in range(heads) for b in range(batch)}
        traced = list(zip(g["m_block"], g["head"], g["batch"]))
        assert len(traced) == len(issued) and set(traced) == issued, name
        assert g["cta"].nunique() <= int(d["sm_count"]), name


def test_tiles_on_one_sm_do_not_overlap(fa4_run):
    _, _, probes = fa4_run
    p = probes[probes["event"].astype(str) == "mainloop"].sort_values(["dump", "slice", "t_gt_ns"], kind="stable")
    begin = p[p["kind"].astype(str) == "begin"]
    ends = probes[(probes["event"].astype(str) == "epilogue") & (probes["kind"].astype(str) == "end")]
    ends = ends.sort_values(["dump", "slice", "t_gt_ns"], kind="stable")
    assert len(begin) == len(ends)
    same = (begin["dump"].astype(str).to_numpy()[1:] == begin["dump"].astype(str).to_numpy()[:-1]) & \
           (begin["slice"].to_numpy()[1:] == begin["slice"].to_numpy()[:-1])
    # the next tile on an SM starts after the previous one's epilogue ended
    assert (begin["t_gt_ns"].to_numpy()[1:][same] >= ends["t_gt_ns"].to_numpy()[:-1][same]).all()


def test_causal_qloops_follow_their_kv_blocks(fa4_run):
    tiles, _, _ = fa4_run
    causal = tiles[(tiles["causal"] == 1) & (tiles["dest"] == "local") & (tiles["seqlen"] >= 4096)]
    assert len(causal)
    for name, g in causal.groupby("dump"):
        assert spearmanr(g["kv_blocks"], g["mainloop_ns"]).statistic > 0.9, name
        assert g["kv_blocks"].max() == -(-int(g["seqlen"].iloc[0]) // int(g["block_n"].iloc[0])) and g["kv_blocks"].min() == 1
    assert np.isfinite(tiles["gap_after_ns"]).any()


def test_probe_builds_match_upstream_bit_for_bit_and_sdpa_to_bf16_accuracy():
    rows = list(csv.DictReader(open(FA4 / "check.csv")))
    assert {r["build"] for r in rows} == {"plain", "off", "traced"} and len(rows) == 3 * 20
    assert all(r["bitwise_equal_to_plain"] == "1" for r in rows)
    # FA4's O against the float32 reference: within twice torch's own bf16 SDPA error on the same inputs
    assert all(float(r["max_abs_err_vs_fp32"]) <= 2 * float(r["sdpa_bf16_max_abs_err_vs_fp32"]) for r in rows)
