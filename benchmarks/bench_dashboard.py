"""Dashboard page times over a synthetic 10 M probe-record run (SYNTHETIC: the 8 shipped fused-kernel
dumps linked 25 times under new names, with the real nsys report; nothing of it is committed).

Per page: the first load (reads and caches the run's tables) and the median / max of 5 reruns
after it (what a user sees on every interaction), measured with Streamlit's AppTest (script time,
server side). With ``--browser``, also the time from navigation until Streamlit is idle in
headless chromium (/usr/bin/chromium), after a first visit.

    python benchmarks/bench_dashboard.py [--copies 25] [--run EXISTING_RUN] [--browser]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACED = ROOT / "sample_traces" / "h200_fused_moe" / "traced"
PAGES = ["overview", "timeline", "tiles", "bursts", "calibration", "whatif", "compare"]


def synthetic_run(work: Path, copies: int) -> Path:
    """Link every traced dump ``copies`` times under new names and analyze them with the nsys report."""
    from xstage_trace.pipeline.runner import analyze_inputs

    dumps = work / "dumps"
    dumps.mkdir(parents=True, exist_ok=True)
    for i in range(copies):
        for f in sorted(TRACED.glob("*.xsp*")):
            link = dumps / f"synthetic_c{i:02d}_{f.name}"
            if not link.exists():
                link.symlink_to(f)
    out = work / "synthetic.xstage-run"
    if not out.exists():
        t = time.perf_counter()
        s = analyze_inputs([TRACED / "fused_reference.nsys-rep", dumps], out,
                           calibration=ROOT / "sample_traces" / "h200_calibration" / "calibration_host.json")
        print(f"analyze: {s['probes']:,} probe records, {s['tiles']:,} tiles, {s['bursts']:,} bursts in {time.perf_counter() - t:.1f} s")
    return out


def apptest_times(run: Path, reruns: int = 5) -> None:
    from streamlit.testing.v1 import AppTest

    print("| page | first load s | rerun median s | rerun max s |\n|---|---|---|---|")
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "src" / "xstage_trace" / "app" / "main.py"), default_timeout=600)
        at.session_state["run_paths"] = [str(run), str(run)]
        t = time.perf_counter()
        at.run()
        if page != "overview":
            at.switch_page(f"views/{page}.py").run()
        first = time.perf_counter() - t
        assert not at.exception, [e.message for e in at.exception]
        times = []
        for _ in range(reruns):
            t = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t)
        print(f"| {page} | {first:.2f} | {statistics.median(times):.2f} | {max(times):.2f} |")
    print("\n| interaction | s |\n|---|---|")
    at = AppTest.from_file(str(ROOT / "src" / "xstage_trace" / "app" / "main.py"), default_timeout=600)
    at.session_state["run_paths"] = [str(run)]
    at.run()
    at.switch_page("views/timeline.py").run()
    steps = [("timeline: window 1000–1020 µs (spans drawn)", lambda: at.slider(key="timeline_window").set_value((1000.0, 1020.0))),
             ("timeline: another kernel (its spans selected from 10 M records)",
              lambda: at.selectbox(key="timeline_dump").set_value(at.selectbox(key="timeline_dump").options[0])),
             ("tiles: open the page", lambda: at.switch_page("views/tiles.py")),
             ("tiles: another configuration", lambda: at.multiselect(key="tiles_configs").set_value(["host S2 wave"])),
             ("tiles: show the worst tile on the timeline", lambda: at.button(key="tiles_show").click())]
    for label, act in steps:
        act()
        t = time.perf_counter()
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        print(f"| {label} | {time.perf_counter() - t:.2f} |")


def browser_times(run: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "xstage_trace", "dashboard", str(run), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://localhost:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.5)
        # Streamlit shows its running widget only ~0.5 s into a run: settled = absent for 1.5 s in a row;
        # the page is done at the later of its heading appearing and the widget last being seen.
        settled = """() => {
          const now = performance.now();
          if (document.querySelector('[data-testid="stStatusWidget"]')) { window.__xsSeen = now; window.__xsBusy = now; }
          if (window.__xsBusy === undefined) window.__xsBusy = now;
          return now - window.__xsBusy > 1500;
        }"""

        def settle():
            pg.evaluate("window.__xsBusy = performance.now()")
            pg.wait_for_function(settled, polling=100)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"])
            pg = b.new_page(viewport={"width": 1500, "height": 1000})
            pg.set_default_timeout(600_000)
            titles = {"overview": "Overview", "timeline": "Timeline", "tiles": "Tiles", "bursts": "Bursts",
                      "calibration": "Calibration", "whatif": "What-if", "compare": "Compare"}
            t = time.perf_counter()
            pg.goto(url)
            pg.locator("h1").first.wait_for()
            settle()
            print(f"browser, first load of the dashboard (Overview, tables read and cached): {time.perf_counter() - t - 1.5:.2f} s")
            print("| page (browser, sidebar click until the script run is over) | first visit s | second visit s |\n|---|---|---|")
            rows = {p: [] for p in PAGES}
            for _ in range(2):
                for page in PAGES[1:] + PAGES[:1]:
                    t0 = pg.evaluate("window.__xsSeen = 0; performance.now()")
                    pg.locator("[data-testid='stSidebarNav'] a").filter(has_text=titles[page]).first.click()
                    pg.locator("h1").filter(has_text=titles[page]).first.wait_for()
                    t_h1 = pg.evaluate("performance.now()")
                    settle()
                    rows[page].append((max(t_h1, pg.evaluate("window.__xsSeen")) - t0) / 1e3)
            for page, (one, two) in rows.items():
                print(f"| {page} | {one:.2f} | {two:.2f} |")
            b.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=25)
    ap.add_argument("--run", type=Path, help="an existing (synthetic) run folder to time")
    ap.add_argument("--browser", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = a.run or synthetic_run(Path(tmp), a.copies)
        apptest_times(run)
        if a.browser:
            browser_times(run)


if __name__ == "__main__":
    main()
