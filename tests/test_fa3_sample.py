"""The FA3 H200 capture in sample_traces/h200_fa3/ (recipe fa3, instrument/recipes/runs/fa3/driver.cu):
every output tile the launch issued is traced once, and the causal Q-loops scale with their K/V blocks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from conftest import SAMPLES

FA3 = SAMPLES / "h200_fa3"


@pytest.fixture(scope="module")
def fa3_tiles(tmp_path_factory):
    from xstage_trace import open_run
    from xstage_trace.analysis.piggyback import qloop_tiles
    from xstage_trace.runner import analyze_inputs

    dumps = sorted((FA3 / "dumps").glob("*.xsp*"))
    assert dumps, "sample_traces/h200_fa3/dumps holds no probe dumps"
    out = tmp_path_factory.mktemp("fa3") / "run"
    analyze_inputs([FA3 / "dumps"], out)
    run = open_run(out)
    return qloop_tiles(run.probes(), run.dumps()), run.dumps()


def test_every_issued_output_tile_is_traced_once(fa3_tiles):
    tiles, dumps = fa3_tiles
    assert set(tiles["dump"]) == set(dumps["dump"])
    for name, g in tiles.groupby("dump"):
        words = dict(w.split("=") for w in dumps.set_index("dump").loc[name, "label"].split())
        batch, heads, seqlen, bm = (int(words[k]) for k in ("batch", "heads", "seqlen", "block_m"))
        issued = {(m, h, b) for m in range(-(-seqlen // bm)) for h in range(heads) for b in range(batch)}
        traced = list(zip(g["m_block"], g["head"], g["batch"]))
        assert len(traced) == len(issued) and set(traced) == issued, name
        assert g["cta"].nunique() == int(words["ctas"])


def test_causal_qloops_follow_their_kv_blocks(fa3_tiles):
    tiles, _ = fa3_tiles
    causal = tiles[(tiles["causal"] == 1) & (tiles["dest"] == "local") & (tiles["seqlen"] >= 4096)]
    assert len(causal)
    for name, g in causal.groupby("dump"):
        rho = spearmanr(g["kv_blocks"], g["mainloop_ns"]).statistic
        assert rho > 0.9, (name, rho)
        # the last m block visits every K/V block, the first one only its own
        assert g["kv_blocks"].max() == -(-int(g["seqlen"].iloc[0]) // int(g["block_n"].iloc[0])) and g["kv_blocks"].min() == 1
    assert np.isfinite(tiles["gap_after_ns"]).any()
