"""The partition sweep's Markdown report (reports/partition_sweep.py), its CLI and its dashboard page, checked
against a few lines of numpy over the shipped H200 sample's per-C median times (docs/model.md §9; issue 26)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xstage_trace.base.errors import InputError
from xstage_trace.reports.partition_sweep import load_regret_doc, render_partition_sweep

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "sample_traces" / "h200_partition" / "partition_regret.json"


@pytest.fixture(scope="module")
def doc():
    return json.loads(DOC.read_text())


def _numpy_truth(doc):
    """Per workload (oracle C, selected C, regret %) from times_ms alone, and the geomean speedup over the best fixed C."""
    cmax = doc["max_comm_ctas"]
    names, med, sel = [], [], []
    for w in doc["workloads"]:
        names.append(w["workload"])
        med.append([w["times_ms"][str(c)] for c in range(1, cmax + 1)])
        sel.append(w["c_selected"])
    med, sel = np.array(med), np.array(sel)
    rows = np.arange(len(names))
    oracle = med.argmin(axis=1) + 1
    regret = 100 * (med[rows, sel - 1] / med[rows, oracle - 1] - 1)
    logm = np.log(med)
    best = logm.mean(axis=0).argmin()
    speedup = np.exp((logm[:, best] - logm[rows, sel - 1]).mean())
    return names, oracle, sel, regret, best + 1, speedup


def _table_rows(md: str) -> dict[str, list[str]]:
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and re.match(r"^[a-z]+_M\d+", cells[0]):
            rows[cells[0]] = cells
    return rows


def test_report_table_and_summary_match_numpy_over_the_shipped_times(doc):
    md = render_partition_sweep(doc)
    names, oracle, sel, regret, best_c, speedup = _numpy_truth(doc)
    rows = _table_rows(md)
    assert sorted(rows) == sorted(names)
    for n, o, s, r in zip(names, oracle, sel, regret):
        cells = rows[n]
        assert (int(cells[4]), int(cells[5])) == (o, s)
        assert float(cells[8]) == pytest.approx(r, abs=0.006)  # shown to 0.01 %
    m = re.search(r"mean \*\*([\d.]+) %\*\*, max \*\*([\d.]+) %\*\*", md)
    assert float(m.group(1)) == pytest.approx(regret.mean(), abs=0.006)
    assert float(m.group(2)) == pytest.approx(regret.max(), abs=0.006)
    m = re.search(r"best single fixed C \(C = (\d+)\): \*\*([\d.]+)×\*\* geometric mean, 95 % bootstrap interval ([\d.]+) … ([\d.]+)", md)
    assert int(m.group(1)) == best_c
    assert float(m.group(2)) == pytest.approx(speedup, abs=1e-4)
    assert float(m.group(3)) <= float(m.group(2)) <= float(m.group(4))
    assert re.search(r"solver: \*\*([\d.]+) µs\*\*", md).group(1) == f"{doc['solver_us']:.3f}"
    over = [n for n, r in zip(names, regret) if r > 5.0]
    assert ("above 5 % regret: " + (", ".join(over) if over else "none")) in md


def test_report_names_a_workload_above_5_percent(doc):
    d = json.loads(json.dumps(doc))
    w = d["workloads"][0]
    t = {int(k): v for k, v in w["times_ms"].items()}
    worst = max((c for c in t if c <= d["max_comm_ctas"]), key=t.get)
    w["c_selected"], w["regret_pct"] = worst, 100 * (t[worst] / t[w["c_oracle"]] - 1)
    assert w["regret_pct"] > 5
    assert f"above 5 % regret: {w['workload']}" in render_partition_sweep(d)


def test_load_regret_doc_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"workloads": []}))
    with pytest.raises(InputError):
        load_regret_doc(p)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "xstage_trace", "model", "partition-sweep", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_cli_writes_the_markdown_report_of_a_regret_document(doc, tmp_path):
    out = tmp_path / "sweep.md"
    r = _cli(DOC, "-o", out)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == render_partition_sweep(doc)


def test_cli_bad_document_is_one_line_exit_2(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    r = _cli(p, "-o", tmp_path / "x.md")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "bad.json" in r.stderr
    assert not (tmp_path / "x.md").exists()


def test_dashboard_partition_page_shows_the_shipped_sweep(doc):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "src" / "xstage_trace" / "app" / "main.py"), default_timeout=120)
    at.session_state["run_paths"] = []
    at.run()
    at.switch_page("views/partition.py").run()
    assert not at.exception, [e.message for e in at.exception]
    _, _, _, regret, _, _ = _numpy_truth(doc)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["mean regret"] == f"{regret.mean():.2f} %"
    assert metrics["max regret"] == f"{regret.max():.2f} %"
    shown = at.dataframe[0].value
    assert len(shown) == len(doc["workloads"])
