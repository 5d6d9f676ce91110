"""The real dashboard in a real browser: ``xstage-trace dashboard`` on a free localhost port, every
page visited with Playwright driving Debian's chromium, and what a person reads there asserted (the
verdict sentence, the cause, the units in the table headers, the gate's decision), the expected
numbers taken from the run's own tables. Screenshots go to a temporary folder, or to
``--screenshots DIR`` (tools/refresh_screenshots.py: docs/screenshots). Skipped only where
/usr/bin/chromium is absent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import xstage_trace

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def shots(request, tmp_path_factory) -> Path:
    """Where the screenshots go: ``--screenshots DIR``, else a temporary folder (never the checkout)."""
    given = request.config.getoption("--screenshots")
    folder = Path(given) if given else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def dashboard(fused_run_dir, partial_runs):
    """The dashboard started by the CLI over the fused run and the run without calibration."""
    port = _free_port()
    cmd = [sys.executable, "-m", "xstage_trace", "dashboard", str(fused_run_dir), str(partial_runs["no_calibration"]),
           "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    url = f"http://localhost:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGTERM)
            pytest.fail(f"dashboard did not start: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.5)
    yield url
    os.killpg(proc.pid, signal.SIGTERM)  # the CLI and the streamlit server it started (its own session)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def page(dashboard):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        pg = browser.new_page(viewport={"width": 1500, "height": 1000})
        pg.set_default_timeout(60_000)
        yield pg
        browser.close()


# Streamlit shows its "running" status widget only some 0.5 s into a run: the page has settled once
# the widget has been absent for QUIET_MS in a row.
QUIET_MS = 1500
SETTLED = """(quiet) => {
  const now = performance.now();
  if (document.querySelector('[data-testid="stStatusWidget"]') || window.__xsBusy === undefined) window.__xsBusy = now;
  return now - window.__xsBusy > quiet;
}"""


def _settle(page) -> None:
    page.evaluate("window.__xsBusy = performance.now()")
    page.wait_for_function(SETTLED, arg=QUIET_MS, polling=100)


def _visit(page, url: str, heading: str):
    page.goto(url)
    page.get_by_role("heading", name=heading).first.wait_for()
    _settle(page)
    return page


def _metric(page, label: str):
    """The value of the metric labelled ``label`` (a locator: expect() retries until the page settles)."""
    m = page.locator("[data-testid='stMetric']").filter(has_text=label).first
    return m.locator("[data-testid='stMetricValue']")


def _expect_metric(page, label: str, value) -> None:
    from playwright.sync_api import expect

    expect(_metric(page, label)).to_have_text(value, timeout=60_000)


def _tables(page) -> list[list[str]]:
    """The column headers of every st.dataframe on the page, top to bottom (each grid's accessible
    table, drawn once the grid has been scrolled into view)."""
    out = []
    frames = page.locator("[data-testid='stDataFrame']")
    for i in range(frames.count()):
        f = frames.nth(i)
        if not f.is_visible():  # inside a closed expander: not what a person sees first
            continue
        f.scroll_into_view_if_needed()
        f.locator("table th").first.wait_for(state="attached")
        out.append([t.strip() for t in f.locator("table th").all_text_contents()])
    return out


def _table_with(page, header: str) -> list[str]:
    """The headers of the first st.dataframe that has a column named ``header``."""
    return next((h for h in _tables(page) if header in h), [])


def _cells_of(page, header: str) -> list[str]:
    """The cells of the first st.dataframe that has a column named ``header``."""
    frames = page.locator("[data-testid='stDataFrame']")
    for i in range(frames.count()):
        f = frames.nth(i)
        if not f.is_visible():
            continue
        f.scroll_into_view_if_needed()
        f.locator("table th").first.wait_for(state="attached")
        if header in [t.strip() for t in f.locator("table th").all_text_contents()]:
            return [t.strip() for t in f.locator("table td").all_text_contents()]
    return []


def _alert_with(page, text: str):
    """The first alert box (st.error / success / info / warning) whose text holds ``text``."""
    return page.locator("[data-testid='stAlert']").filter(has_text=text).first


def _shot(page, shots: Path, name: str, chart: bool = True) -> None:
    if chart:
        page.locator(".js-plotly-plot").first.wait_for()
        page.wait_for_timeout(800)  # let plotly finish its first draw
    page.screenshot(path=str(shots / f"{name}.png"))


def _us(ns: float) -> str:
    """A stall as the verdict sentences print it: µs to 3 significant digits."""
    return "0 µs" if ns == 0 else f"{ns / 1e3:.3g} µs"


def test_overview_leads_with_a_verdict_sentence_per_configuration(dashboard, page, fused_run_dir, shots):
    run = xstage_trace.open_run(fused_run_dir)
    v = run.verdicts()
    name = fused_run_dir.name
    _visit(page, f"{dashboard}/", f"Overview: {name}")  # the default page lives at /
    worst = v[v["verdict"] == "stall-bound"].sort_values("measured_stall_ns").iloc[-1]
    label = f"{worst['dest']} {worst['shape']} {worst['variant']} {worst['schedule']}"
    box = _alert_with(page, label)
    box.wait_for()
    text = box.inner_text()
    cause = worst["diagnosis"].replace("_", " ")
    assert f"stall-bound by {cause}" in text and f"median stall {_us(worst['measured_stall_ns'])} measured" in text
    t3 = run.table3().set_index(["dest", "shape", "variant", "schedule"])
    key = (worst["dest"], worst["shape"], worst["variant"])
    speed = t3.loc[(*key, "wave"), "kernel_ns"] / t3.loc[(*key, "interleaved"), "kernel_ns"]
    assert "Fix: interleave" in text and f"{speed:.2f}× faster" in text  # the run's own kernel times under both schedules
    _shot(page, shots, "overview", chart=False)
    heads = _table_with(page, "cause")
    assert "stall measured (µs)" in heads and "kernel (ms)" in heads
    assert _table_with(page, "speedup wave / interleaved")


def test_the_overview_deep_link_opens_the_overview(dashboard, page, fused_run_dir):
    _visit(page, f"{dashboard}/overview", f"Overview: {fused_run_dir.name}")
    assert page.get_by_text("Page not found").count() == 0


def test_tiles_show_their_distribution_in_the_units_of_its_axis(dashboard, page, fused_run_dir, shots):
    run = xstage_trace.open_run(fused_run_dir)
    tiles = run.tiles()
    name = fused_run_dir.name
    _visit(page, f"{dashboard}/tiles", f"Tiles: {name}")
    s1_wave = (tiles["dest"] == "host") & (tiles["shape"] == "S1") & (tiles["schedule"] == "wave") & (tiles["tile_kind"] == "linear2")
    _expect_metric(page, "backpressured", f"{int(tiles.loc[s1_wave, 'backpressured'].sum()):,}")
    _shot(page, shots, "tiles")
    heads = _table_with(page, "median (µs)")
    assert heads and not any(h.endswith("ns") for h in heads)
    page.get_by_role("button", name="Show on the timeline").click()  # the worst tile, on the timeline
    page.get_by_role("heading", name=f"Timeline: {name}").wait_for()
    page.get_by_text("Selected tile (from the Tiles page)").wait_for()
    _settle(page)
    _expect_metric(page, "drawn as", "spans")
    _shot(page, shots, "timeline_tile")


def test_timeline_and_bursts_pages(dashboard, page, fused_run_dir, shots):
    run = xstage_trace.open_run(fused_run_dir)
    name = fused_run_dir.name
    _visit(page, f"{dashboard}/timeline", f"Timeline: {name}")
    _expect_metric(page, "drawn as", "heat map")  # a whole kernel has ~20k spans: aggregated
    _shot(page, shots, "timeline")
    _visit(page, f"{dashboard}/bursts", f"Bursts: {name}")
    busiest = run.tiles().groupby("dump")["backpressured"].sum().idxmax()  # the page opens on the most backpressured kernel
    _expect_metric(page, "bursts", f"{int((run.bursts()['dump'] == busiest).sum()):,}")
    _shot(page, shots, "bursts")


def test_calibration_shows_q_with_its_interval(dashboard, page, fused_run_dir, shots):
    run = xstage_trace.open_run(fused_run_dir)
    doc = run.calibration_document()
    _visit(page, f"{dashboard}/calibration", f"Calibration: {fused_run_dir.name}")
    _expect_metric(page, "R (GB/s)", f"{doc['rate_gbps']:.1f} ± {doc['rate_uncertainty_gbps']:.1f}")
    _shot(page, shots, "calibration", chart=False)
    cells = _cells_of(page, "interval (MiB)")
    lo, hi = doc["capacity_interval_bytes"]["132"]
    assert f"{lo / 2**20:.2f} – {hi / 2**20:.2f}" in cells and "None" not in cells
    _expect_metric(page, "loop overhead o (µs)", f"{doc['loop_overhead_ns'] / 1e3:.3f}")


def test_whatif_starts_from_the_runs_own_measurement(dashboard, page, fused_run_dir, shots):
    run = xstage_trace.open_run(fused_run_dir)
    t = run.tiles()
    l2 = t[(t["dest"] == "host") & (t["shape"] == "S1") & (t["schedule"] == "wave") & (t["tile_kind"] == "linear2")].dropna(subset=["rs_span_ns"])
    _visit(page, f"{dashboard}/what-if", f"What-if: {fused_run_dir.name}")
    _expect_metric(page, "expert-wave: verdict", "stall")
    _expect_metric(page, "interleaved: verdict", "no stall")
    _expect_metric(page, "measured span T_RS, wave (µs)", f"{l2['rs_span_ns'].median() / 1e3:.2f}")  # the run's own span
    assert _alert_with(page, "reproduces the measured stall").count() == 1
    _shot(page, shots, "whatif")


def test_compare_leads_with_the_gate_decision_and_matches_on_its_keys(dashboard, page, shots):
    _visit(page, f"{dashboard}/compare", "Compare")
    page.get_by_role("heading", name="Two runs").wait_for()
    _alert_with(page, "PASS").wait_for()  # same dumps, analyzed without calibration: no kernel-time change
    _expect_metric(page, "kernel time B vs A (median over configurations)", "+0.0 %")
    _expect_metric(page, "configurations whose verdict changed", "0")
    _shot(page, shots, "compare", chart=False)
    assert "gate verdict" in _table_with(page, "Δ kernel (%)")
