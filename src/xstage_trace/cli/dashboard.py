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


def check_port(address: str, port: int) -> None:
    """InputError unless ``port`` is a TCP port (1-65535) that is free on ``address`` (bound and
    released here, so a port in use is one line, not Streamlit's log and exit 1)."""
    import socket

    if not 1 <= port <= 65535:
        raise InputError(None, f"--port {port} is not a TCP port", "pass --port between 1 and 65535, e.g. --port 8501")
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InputError(None, f"--address {address!r} is not an interface here ({exc.strerror})", "pass --address localhost or an address of this machine") from None
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as s:
        try:
            s.bind(where)
        except OSError as exc:
            raise InputError(None, f"--port {port} on {address} is not free ({exc.strerror})", "pass another --port, or stop what listens there") from None


@app.command("dashboard")
def dashboard(
    runs: List[Path] = typer.Argument(..., help="run folders written by xstage-trace analyze -o (two or more to compare)"),
    port: int = typer.Option(8501, "--port", help="local port to serve on"),
    address: str = typer.Option("localhost", "--address", help="interface to listen on"),
):
    """Browse runs in the dashboard (Streamlit): overview, timeline, tiles, bursts, calibration, what-if, compare."""
    from xstage_trace import open_run

    check_port(address, port)
    for r in runs:
        open_run(r)  # one line and exit 2 for a folder that is not a run
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("plotly") is None:
        raise InputError(None, "the dashboard needs streamlit and plotly", "pip install 'xstage-trace[app]'")
    raise typer.Exit(subprocess.call(streamlit_command(runs, port, address)))
