"""``xstage-trace dashboard RUN [RUN2 ...]``: the Streamlit dashboard over run datasets."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import List

import typer

from xstage_trace.base.errors import InputError
from xstage_trace.cli import app


def streamlit_command(runs: list[Path], port: int, address: str) -> list[str]:
    """The ``streamlit run`` command line: headless, on ``address:port``, run folders after ``--``."""
    from xstage_trace.app import APP_SCRIPT

    return [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), "--server.headless", "true",
            "--server.port", str(port), "--server.address", address, "--browser.gatherUsageStats", "false",
            "--", *[str(Path(r).resolve()) for r in runs]]


@app.command("dashboard")
def dashboard(
    runs: List[Path] = typer.Argument(..., help="run folders written by xstage-trace analyze -o (two or more to compare)"),
    port: int = typer.Option(8501, "--port", help="local port to serve on"),
    address: str = typer.Option("localhost", "--address", help="interface to listen on"),
):
    """Browse runs in the dashboard (Streamlit): overview, timeline, tiles, bursts, calibration, what-if, compare."""
    from xstage_trace import open_run

    for r in runs:
        open_run(r)  # one line and exit 2 for a folder that is not a run
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("plotly") is None:
        raise InputError(None, "the dashboard needs streamlit and plotly", "pip install 'xstage-trace[app]'")
    raise typer.Exit(subprocess.call(streamlit_command(runs, port, address)))
