"""The FA3 H200 capture with the recipe's opt-in K/V steps (sample_traces/h200_fa3_kv_steps/, built with
-DXSTAGE_FA3_KV_STEPS=1): checked against the recipe's contract (instrument/targets/fa3/files/hopper/xstage_fa3.h)
on the real dumps -- tile sampling: every mainloop begin record carries the sampling period S (the build's
XSTAGE_FA3_KV_EVERY, default 8, also the label's kv_every), the writer's tiles 0, S, 2S, ... of each slice (in the
slice's record order) carry the K/V steps of their last min(K/V blocks, 16) blocks, in the order the loop ran them
(block n descending to 0), each beginning where its predecessor ended, all inside the tile's Q-loop span, the first
block's step (when all are recorded) beginning at the Q-loop's begin; the other tiles carry none."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import SAMPLES

KV = SAMPLES / "h200_fa3_kv_steps"
RING = 16  # kKvSlots in xstage_fa3.h: the tile's last blocks the ring holds
EVERY = 8  # XSTAGE_FA3_KV_EVERY's default in xstage_fa3.h, the build this sample ran
KEYS = ["rank", "dump", "cta", "tile"]


@pytest.fixture(scope="module")
def kv_run(tmp_path_factory):
    from xstage_trace import open_run
    from xstage_trace.analysis.piggyback import kv_step_spans, qloop_tiles
    from xstage_trace.pipeline.runner import analyze_inputs

    dumps = sorted((KV / "dumps").glob("*.xsp*"))
    assert len(dumps) == 20, "sample_traces/h200_fa3_kv_steps/dumps should hold the run's 20 probe dumps"
    out = tmp_path_factory.mktemp("fa3kv") / "run"
    analyze_inputs([KV / "dumps"], out)
    run = open_run(out)
    probes = run.probes()
    steps = kv_step_spans(probes).assign(dump=lambda f: f["dump"].astype(str))
    return qloop_tiles(probes, run.dumps()), steps, probes, run.dumps()


def _slice_ordinals(probes: pd.DataFrame) -> pd.DataFrame:
    """Per tile its ordinal in its slice, counted from the slice's mainloop begin records in record order (the
    writer's tile order), and that record's payload."""
    b = probes[(probes["event"] == "mainloop").to_numpy() & (probes["kind"] == "begin").to_numpy()]
    b = b.assign(dump=b["dump"].astype(str))
    return b.assign(ordinal=b.groupby(["rank", "dump", "slice"], sort=False).cumcount())[[*KEYS, "ordinal", "payload"]]


def test_every_mainloop_begin_names_the_sampling_period(kv_run):
    """The begin records' payload is the build's S on every tile, the label's kv_every says the same, and the
    analysis reads it as the tiles' kv_every."""
    tiles, _, probes, dumps = kv_run
    o = _slice_ordinals(probes)
    assert len(o) == 20 * 2048 and (o["payload"] == EVERY).all()
    for label in dumps["label"]:
        assert f"kv_every={EVERY}" in label.split()
    assert (tiles["kv_every"] == EVERY).all()


def test_sampled_tiles_carry_their_kv_steps_in_order_inside_their_qloop(kv_run):
    tiles, steps, probes, _ = kv_run
    assert tiles["dump"].nunique() == 20 and len(tiles) == 20 * 2048
    t = tiles.merge(_slice_ordinals(probes)[[*KEYS, "ordinal"]], on=KEYS, how="left", validate="one_to_one")
    sampled = t["ordinal"] % EVERY == 0
    assert np.array_equal(sampled.to_numpy(), t["kv_sampled"].to_numpy())  # the analysis' flag is the slice order's
    s = steps.merge(t[[*KEYS, "start_ns", "mainloop_ns", "kv_blocks", "ordinal"]].rename(columns={"start_ns": "ml_start_ns"}),
                    on=KEYS, how="left", validate="many_to_one")
    assert s["ml_start_ns"].notna().all(), "a K/V step of a tile without a Q-loop span"
    s = s.sort_values([*KEYS, "start_ns", "kv_block"], ascending=[True] * 5 + [False], kind="stable").reset_index(drop=True)
    # every sampled tile: min(K/V blocks, 16) steps (the last blocks of its loop); the others none
    count = s.groupby(KEYS).size().rename("n").reset_index().merge(t[[*KEYS, "kv_blocks", "ordinal"]], on=KEYS, how="right")
    want = np.where(count["ordinal"] % EVERY == 0, np.minimum(count["kv_blocks"], RING), 0)
    assert (count["n"].fillna(0).to_numpy() == want).all()
    assert (t[sampled].groupby("dump")["cta"].nunique() == 132).all()  # every CTA's first tile at least
    # in the order the loop ran them: blocks k-1 ... 0
    rank_in_tile = s.groupby(KEYS).cumcount().to_numpy()
    k = np.minimum(s["kv_blocks"].to_numpy(), RING)
    assert (s["kv_block"].to_numpy() == k - 1 - rank_in_tile).all()
    # contiguous: each step begins where its predecessor ended (one mark), none negative
    same_tile = (s[KEYS].shift() == s[KEYS]).all(axis=1).to_numpy()
    prev_end = s["end_ns"].shift().to_numpy()
    assert np.array_equal(s["start_ns"].to_numpy()[same_tile], prev_end[same_tile])
    assert (s["step_ns"] >= 0).all()
    # inside the Q-loop span; the first block's step (all blocks recorded) begins with it
    ml_end = s["ml_start_ns"] + s["mainloop_ns"]
    assert (s["start_ns"] >= s["ml_start_ns"]).all() and (s["end_ns"] <= ml_end).all()
    first = (rank_in_tile == 0) & (s["kv_blocks"].to_numpy() <= RING)
    assert first.any() and np.array_equal(s["start_ns"].to_numpy()[first], s["ml_start_ns"].to_numpy()[first])


def test_unsampled_tiles_have_no_step_columns(kv_run):
    tiles, _, _, _ = kv_run
    off = tiles[~tiles["kv_sampled"]]
    assert len(off) and (off["kv_steps"] == 0).all()
    assert off[["kv_step_median_ns", "kv_step_max_ns", "qloop_tail_ns"]].isna().all().all()


def test_tile_columns_summarize_the_tiles_steps(kv_run):
    tiles, steps, _, _ = kv_run
    g = steps.groupby(KEYS)
    by_hand = pd.DataFrame({"n": g.size(), "med": g["step_ns"].median(), "mx": g["step_ns"].max(), "exit": g["end_ns"].max()})
    t = tiles.set_index(KEYS).loc[by_hand.index]
    assert (t["kv_steps"] == by_hand["n"]).all()
    assert np.allclose(t["kv_step_median_ns"], by_hand["med"]) and np.allclose(t["kv_step_max_ns"], by_hand["mx"])
    assert np.allclose(t["qloop_tail_ns"], t["start_ns"] + t["mainloop_ns"] - by_hand["exit"])
    assert (t["qloop_tail_ns"] >= 0).all()


def test_driver_checked_every_bench_dump_and_the_overhead_table_is_the_trials_medians():
    """records_bench.csv (the driver's check of each dump's records against the sampled layout) is ok for all 20
    cases, every tile traced once; overhead.csv is the per-case median of times.csv's 300 trials per build."""
    rec = pd.read_csv(KV / "records_bench.csv")
    assert len(rec) == 20 and (rec["ok"] == 1).all() and (rec["tiles_traced_once"] == rec["tiles"]).all()
    assert (rec["kv_step_records"] > 0).all()
    times = pd.read_csv(KV / "times.csv.gz")
    table = pd.read_csv(KV / "overhead.csv").set_index(["dest", "seqlen", "causal"])
    med = times.pivot_table(index=["dest", "seqlen", "causal"], columns="build", values="kernel_ms", aggfunc="median")
    assert (times.groupby(["dest", "seqlen", "causal", "build"]).size() == 300).all()
    for b in ("plain", "traced", "cleared"):
        assert np.allclose(table[f"{b}_ms"], med.loc[table.index, b], atol=5e-6), b
