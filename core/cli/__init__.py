"""The ``xstage-trace`` command line: a thin layer over the API, collectors/ and analysis/.

One module per command group (analyze, calibrate, model, instrument, collection); each registers
its commands on ``app`` when imported below. Start-up stays under 0.5 s (benchmarks/bench_startup.py):
command modules import numpy, pandas, pyarrow, scipy, duckdb and rich's renderables inside the
command function, and the consoles below import rich only when something is printed, so ``--json``
commands never load it.
"""

from __future__ import annotations

import json
import sys

import typer

from xstage_trace.base.errors import InputError
from xstage_trace.base.jsonable import json_default

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Tile-level profiling of GPU kernels that fuse compute with remote stores (the X-Stage model).")


class LazyConsole:
    """A ``rich.console.Console`` built on first use; every attribute is the real console's
    (``.console`` is the console itself, for APIs that want one, e.g. ``rich.progress.Progress``)."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs
        self._console = None

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.console, name)


err = LazyConsole(stderr=True)
out = LazyConsole(width=None if sys.stdout.isatty() else 160)  # piped or logged: wide enough for Table 3


def emit(doc: dict) -> None:
    """One JSON object on stdout."""
    sys.stdout.write(json.dumps(doc, default=json_default) + "\n")


def main() -> None:
    """Entry point: bad input becomes one line on stderr and exit code 2 (usage errors too)."""
    try:
        app()
    except InputError as exc:
        err.print(f"xstage-trace: error: {exc.one_line()}", highlight=False, soft_wrap=True)
        sys.exit(2)


from xstage_trace.cli import analyze as _analyze, calibrate as _calibrate, instrument as _instrument, model as _model  # noqa: E402,F401  (registers the commands)
from xstage_trace.cli import collection as _collection  # noqa: E402,F401
