"""Dashboard page times over a synthetic 10 M probe-record run (SYNTHETIC: the 8 shipped fused-kernel
dumps linked 25 times under new names, with the real nsys report; nothing of it is committed).

Per page: the first load (reads and caches the run's tables) and the median / max of 5 reruns
after it (what a user sees on every interaction), measured with Streamlit's AppTest (script time,
server side). With ``--browser``, also the time from navigation until Streamlit is idle in
headless chromium (/usr/bin/chromium), after a first visit.

With ``--first-page``: the dashboard's first page on the shipped fused sample (or ``--run``) as a user
waits for it, each time in a fresh process: interpreter start and Streamlit's import, then the first
script run of the Overview page over the freshly opened run (Streamlit's scan of the installed packages for
components, which a server makes once when it starts and AppTest in its first run, made and timed before it), split into imports, table reads, Arrow →
pandas, shaping (app/shaping.py, reports/), figures (app/figures.py) and the rest (Streamlit elements,
the page's own lines); ``--src`` trees are measured alternately (before/after a change).

    python benchmarks/bench_dashboard.py [--copies 25] [--run EXISTING_RUN] [--browser]
    python benchmarks/bench_dashboard.py --first-page [--run RUN] [--src OLD/src src] [--repeat 3]
    python benchmarks/bench_dashboard.py --first-page --browser --run RUN [--src OLD/src src] [--connect-after 2]

(``--first-page --browser``: a fresh ``xstage-trace dashboard RUN`` each time, the page opened in headless
chromium ``--connect-after`` seconds after the server's health check, until its last header is shown.)
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


FUSED_ANALYZE = ["sample_traces/h200_fused_moe/traced/fused_reference.nsys-rep", "sample_traces/h200_fused_moe/traced",
                 "--calibration", "sample_traces/h200_calibration/path_drain/calibration_host_tensor2d.json",
                 "--warmup-launches", "2"]
# innermost wins: a table read inside shaping counts as a read, an import inside a read as an import
SPLIT = {"xstage_trace.dataset.api": "reads", "xstage_trace.base.run_files": "reads", "pyarrow.pandas_compat": "to_pandas",
         "xstage_trace.app.shaping": "shaping", "xstage_trace.reports.verdict_text": "shaping",
         "xstage_trace.reports.content": "shaping", "xstage_trace.reports.configs": "shaping", "xstage_trace.app.figures": "figures"}


def first_page_child(run: str) -> None:
    """In a fresh process (PYTHONPATH = the tree to time): import Streamlit's AppTest, then run the
    Overview page once over ``run``, timing each call of the SPLIT modules' functions (self time per
    category) and every import (Python's import machinery wrapped); prints one JSON line."""
    import functools
    import json
    import os
    import sys
    import threading

    t0 = time.perf_counter()
    from streamlit.testing.v1 import AppTest

    t_streamlit = time.perf_counter() - t0
    local, acc, on = threading.local(), {}, [False]

    def push(cat):
        now, st = time.perf_counter(), getattr(local, "stack", None)
        if st is None:
            st = local.stack = [["page", now]]
        acc[st[-1][0]] = acc.get(st[-1][0], 0.0) + now - st[-1][1]
        st.append([cat, now])

    def pop():
        now, st = time.perf_counter(), local.stack
        cat, since = st.pop()
        acc[cat] = acc.get(cat, 0.0) + now - since
        st[-1][1] = now

    def timed(f, cat):
        @functools.wraps(f)
        def w(*a, **k):
            if not on[0]:
                return f(*a, **k)
            push(cat)
            try:
                return f(*a, **k)
            finally:
                pop()
        return w

    def instrument(name):
        mod, cat = sys.modules[name], SPLIT[name]
        for k, v in list(vars(mod).items()):
            if getattr(v, "__module__", None) != name:
                continue
            if isinstance(v, type):
                for m, f in list(vars(v).items()):
                    if callable(f) and not isinstance(f, type) and not m.startswith("__") or m == "__init__":
                        setattr(v, m, timed(f, cat))
            elif callable(v):
                setattr(mod, k, timed(v, cat))

    boot = sys.modules["_frozen_importlib"]
    find_and_load = boot._find_and_load

    def loading(name, import_):
        if not on[0]:
            return find_and_load(name, import_)
        push("imports")
        try:
            return find_and_load(name, import_)
        finally:
            pop()
            if name in SPLIT and not getattr(sys.modules.get(name), "_xs_timed", False):
                instrument(name)
                sys.modules[name]._xs_timed = True

    for name in SPLIT:  # already imported by Streamlit (pyarrow.pandas_compat may be)
        if name in sys.modules:
            instrument(name)
            sys.modules[name]._xs_timed = True
    boot._find_and_load = loading
    at = AppTest.from_file(os.environ["XS_APP"], default_timeout=600)
    at.session_state["run_paths"] = [run]
    # a Streamlit server scans the installed packages for components once, when it starts (Runtime's constructor),
    # before any page is asked for; AppTest would do it inside its first run: done here, as the server's start
    t = time.perf_counter()
    from streamlit.components.v2.component_manager import BidiComponentManager

    components = BidiComponentManager()
    components.discover_and_register_components(start_file_watching=False)
    at._bidi_component_manager = components
    t_scan = time.perf_counter() - t
    on[0] = True
    t, cpu = time.perf_counter(), time.process_time()
    at.run()
    page, cpu = time.perf_counter() - t, time.process_time() - cpu
    on[0] = False
    assert not at.exception, [e.message for e in at.exception]
    assert at.title[0].value.startswith("Overview"), at.title
    import hashlib
    import re

    def protos(node):  # every element the page drew, widget ids (they hash the script's path) left out
        p = getattr(node, "proto", None)
        yield type(node).__name__ + ":" + re.sub(r"\$\$ID-[0-9a-f]+-", "$$ID-", str(p) if p is not None else "")
        for child in (node.children.values() if isinstance(getattr(node, "children", None), dict) else []):
            yield from protos(child)
    page_sha = hashlib.sha256("\n".join(protos(at._tree)).encode()).hexdigest()[:12]
    split = {k: acc.get(k, 0.0) for k in ("imports", "reads", "to_pandas", "shaping", "figures")}
    split["streamlit_and_page"] = page - sum(split.values())
    print(json.dumps({"page_sha256": page_sha, "streamlit_import_s": t_streamlit, "component_scan_s": t_scan, "page_s": page, "page_cpu_s": cpu, **{f"{k}_s": v for k, v in split.items()}}))
    sys.stdout.flush()
    os._exit(0)  # the process's teardown is no part of the page


def first_page_times(run: Path | None, srcs: list[Path], repeat: int) -> None:
    """Fresh-process first-page times of each tree in ``srcs``, alternately, ``repeat`` rounds."""
    import json
    import os
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        if run is None:
            run = Path(tmp) / "fused.xstage-run"
            env = dict(os.environ, PYTHONPATH=str(srcs[-1]))
            subprocess.run([sys.executable, "-m", "xstage_trace", "analyze", *FUSED_ANALYZE, "-o", str(run)], cwd=ROOT,
                           env=env, check=True, stdout=subprocess.DEVNULL)
        cols = ["streamlit_import_s", "component_scan_s", "page_s", "page_cpu_s", "imports_s", "reads_s", "to_pandas_s", "shaping_s", "figures_s", "streamlit_and_page_s"]
        print(f"first page (Overview) of {run}, fresh process each, {sys.executable}\n")
        print("| tree | load avg (1 min) | process wall s | " + " | ".join(c[:-2].replace("_", " ") + " s" for c in cols) + " |")
        print("|---" * (len(cols) + 3) + "|")
        rows: dict[Path, list[dict]] = {s: [] for s in srcs}
        for _ in range(repeat):
            for src in srcs:
                env = dict(os.environ, PYTHONPATH=str(src), XS_APP=str(Path(src) / "xstage_trace" / "app" / "main.py"))
                load = os.getloadavg()[0]
                t = time.perf_counter()
                out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--first-page-child", str(run)],
                                     env=env, capture_output=True, text=True, check=True)
                wall = time.perf_counter() - t
                r = json.loads(out.stdout.strip().splitlines()[-1]) | {"wall_s": wall, "load": load}
                rows[src].append(r)
                print(f"| {src} | {load:.2f} | {wall:.2f} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
        print("\n| tree | runs | process wall s | first script run of the page s | its CPU s |\n|---|---|---|---|---|")
        for src, rs in rows.items():
            print(f"| {src} | {len(rs)} | " + " | ".join(
                f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" for v in
                ([r[k] for r in rs] for k in ("wall_s", "page_s", "page_cpu_s"))) + " |")
        print("\n(median (min–max); page CPU: the process's, threads together, during the run)")
        shas = {r["page_sha256"] for rs in rows.values() for r in rs}
        print(f"page drawn (every element's message, sha256): {'identical in every run of every tree' if len(shas) == 1 else 'DIFFERS'}"
              f" ({', '.join(sorted(shas))})")


def first_page_browser(run: Path, srcs: list[Path], repeat: int, connect_after_s: float) -> None:
    """The first page in a real server, each time a fresh ``xstage-trace dashboard RUN`` of each tree in
    ``srcs`` (alternately): the browser (headless chromium, started beforehand) opens the page
    ``connect_after_s`` after the server answers its health check; times from the command's start to
    the health check, and from navigation until the page's last header (Warnings) is shown."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from playwright.sync_api import sync_playwright

    print(f"first page (Overview) in the browser, a fresh `xstage-trace dashboard` each time, opened {connect_after_s:g} s "
          f"after the server's health check\n\n| tree | load avg (1 min) | command → health s | navigation → page shown s | command → page shown s |\n|---|---|---|---|---|")
    rows: dict[Path, list[tuple[float, float]]] = {s: [] for s in srcs}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        for _ in range(repeat):
            for src in srcs:
                with socket.socket() as sk:
                    sk.bind(("127.0.0.1", 0))
                    port = sk.getsockname()[1]
                pg = b.new_page(viewport={"width": 1500, "height": 1000})
                pg.set_default_timeout(120_000)
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                err = tempfile.TemporaryFile()
                proc = subprocess.Popen([sys.executable, "-m", "xstage_trace", "dashboard", str(run), "--port", str(port)],
                                        env=dict(os.environ, PYTHONPATH=str(src)), stdout=subprocess.DEVNULL,
                                        stderr=err, start_new_session=True)
                try:
                    while proc.poll() is None and time.perf_counter() - t0 < 120:
                        try:
                            if urllib.request.urlopen(f"http://localhost:{port}/_stcore/health", timeout=2).read() == b"ok":
                                break
                        except OSError:
                            time.sleep(0.02)
                    else:
                        err.seek(0)
                        raise RuntimeError(f"{src}: no dashboard on port {port} (exit {proc.poll()}): {err.read().decode()[-2000:]}")
                    health = time.perf_counter() - t0
                    time.sleep(connect_after_s)
                    t = time.perf_counter()
                    pg.goto(f"http://localhost:{port}")
                    pg.locator("h2").filter(has_text="Warnings").first.wait_for()
                    shown = time.perf_counter()
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=60)
                    pg.close()
                rows[src].append((shown - t, shown - t0))
                print(f"| {src} | {load:.2f} | {health:.2f} | {shown - t:.2f} | {shown - t0:.2f} |")
        b.close()
    print("\n| tree | runs | navigation → page shown s | command → page shown s |\n|---|---|---|---|")
    for src, rs in rows.items():
        print(f"| {src} | {len(rs)} | " + " | ".join(f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" for v in zip(*rs)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=25)
    ap.add_argument("--run", type=Path, help="an existing (synthetic) run folder to time")
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--first-page", action="store_true", help="the Overview's first run in fresh processes (shipped fused sample)")
    ap.add_argument("--src", type=Path, nargs="+", default=[ROOT / "src"], help="source trees to time alternately (--first-page)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--connect-after", type=float, default=2.0, help="--first-page --browser: seconds between health check and navigation")
    ap.add_argument("--first-page-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.first_page_child:
        return first_page_child(a.first_page_child)
    if a.first_page and a.browser:
        if a.run is None:
            ap.error("--first-page --browser needs --run (a run of the shipped fused sample: see FUSED_ANALYZE)")
        return first_page_browser(a.run, [s.resolve() for s in a.src], a.repeat, a.connect_after)
    if a.first_page:
        return first_page_times(a.run, [s.resolve() for s in a.src], a.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        run = a.run or synthetic_run(Path(tmp), a.copies)
        apptest_times(run)
        if a.browser:
            browser_times(run)


if __name__ == "__main__":
    main()
