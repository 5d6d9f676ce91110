"""The ``xstage-trace`` command line: a thin layer over the API, collectors/ and analysis/.

One module per command group (analyze, calibrate, model, instrument); each registers its commands
on ``app`` when imported below. Commands import their heavy dependencies inside the function, so
``--help`` stays fast.
"""

from __future__ import annotations

import json
import sys

import typer
from rich.console import Console

from xstage_trace.base.errors import InputError
from xstage_trace.base.jsonable import json_default

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Tile-level profiling of GPU kernels that fuse compute with remote stores (the X-Stage model).")

err = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 160)  # piped or logged: wide enough for Table 3


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
from xstage_trace.cli import dashboard as _dashboard  # noqa: E402,F401
