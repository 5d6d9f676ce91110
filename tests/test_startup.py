"""CLI start-up: importing the command line loads none of the heavy libraries (timings: benchmarks/bench_startup.py)."""

from __future__ import annotations

import subprocess
import sys


def test_cli_start_up_imports_nothing_heavy():
    code = ("import sys, xstage_trace.cli; "
            "print(sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'scipy', 'duckdb', 'dask', 'distributed', 'rich.console', 'rich.progress') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
