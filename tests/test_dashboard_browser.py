"""The real dashboard in a real browser: ``xstage-trace dashboard`` on a free localhost port, every
page visited with Playwright driving Debian's chromium, headings and numbers asserted, screenshots
written to docs/screenshots/. Skipped only where /usr/bin/chromium is absent."""

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
from conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "docs" / "screenshots"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def _shot(page, name: str, chart: bool = True) -> None:
    if chart:
        page.locator(".js-plotly-plot").first.wait_for()
        page.wait_for_timeout(800)  # let plotly finish its first draw
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_every_page_shows_its_heading_and_key_numbers(dashboard, page, fused_run_dir):
    run = xstage_trace.open_run(fused_run_dir)
    tiles = run.tiles()
    name = fused_run_dir.name

    _visit(page, f"{dashboard}/", f"Overview: {name}")  # the default page lives at /
    _expect_metric(page, "backpressured tiles", f"{int(tiles['backpressured'].sum()):,}")
    _expect_metric(page, "kernel launches (nsys)", f"{len(run.kernels()):,}")
    page.get_by_role("heading", name="Verdict per configuration").wait_for()
    _shot(page, "overview", chart=False)

    _visit(page, f"{dashboard}/tiles", f"Tiles: {name}")
    s1_wave = (tiles["dest"] == "host") & (tiles["shape"] == "S1") & (tiles["schedule"] == "wave") & (tiles["tile_kind"] == "linear2")
    _expect_metric(page, "backpressured", f"{int(tiles.loc[s1_wave, 'backpressured'].sum()):,}")
    _shot(page, "tiles")
    page.get_by_role("button", name="Show on the timeline").click()  # the worst tile, on the timeline
    page.get_by_role("heading", name=f"Timeline: {name}").wait_for()
    page.get_by_text("Selected tile (from the Tiles page)").wait_for()
    _settle(page)
    _expect_metric(page, "drawn as", "spans")
    _shot(page, "timeline_tile")

    _visit(page, f"{dashboard}/timeline", f"Timeline: {name}")
    _expect_metric(page, "drawn as", "heat map")  # a whole kernel has ~20k spans: aggregated
    _shot(page, "timeline")

    _visit(page, f"{dashboard}/bursts", f"Bursts: {name}")
    busiest = tiles.groupby("dump")["backpressured"].sum().idxmax()  # the page opens on the most backpressured kernel
    _expect_metric(page, "bursts", f"{int((run.bursts()['dump'] == busiest).sum()):,}")
    _shot(page, "bursts")

    _visit(page, f"{dashboard}/calibration", f"Calibration: {name}")
    doc = run.calibration_document()
    _expect_metric(page, "R (GB/s)", f"{doc['rate_gbps']:.1f} ± {doc['rate_uncertainty_gbps']:.1f}")
    _shot(page, "calibration", chart=False)

    _visit(page, f"{dashboard}/what-if", f"What-if: {name}")
    _expect_metric(page, "expert-wave: verdict", "stall")  # S1 host: V/R ≈ 64 µs against a 7.6 µs mainloop
    _shot(page, "whatif")

    _visit(page, f"{dashboard}/compare", "Compare")
    page.get_by_role("heading", name="Two runs").wait_for()
    _expect_metric(page, "configurations whose verdict changed", "0")  # same dumps, analyzed without calibration
    _shot(page, "compare", chart=False)
