"""The ``xstage-trace`` command line: a thin layer over the API, collectors/ and analysis/.

One module per command group (analyze, calibrate, model, instrument, collection, report, compare, export); each registers
its commands on ``app`` when imported below. Start-up stays under 0.5 s (benchmarks/bench_startup.py):
command modules import numpy, pandas, pyarrow, scipy, duckdb and rich's renderables inside the
command function, and the consoles below import rich only when something is printed, so ``--json``
commands never load it.
"""

from __future__ import annotations

import os
import signal
import sys

import typer

from xstage_trace.base.errors import InputError, printable
from xstage_trace.base.jsonable import dumps

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False,
                  help="Tile-level profiling of GPU kernels that fuse compute with remote stores (the X-Stage model).")


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


# markup=False: file names, dump labels and GPU names reach tables and messages; "[/x]" in one of
# them must print as it is, not be parsed as rich markup (or raise MarkupError).
err = LazyConsole(stderr=True, markup=False)
out = LazyConsole(width=None if sys.stdout.isatty() else 160, markup=False)  # piped or logged: wide enough for Table 3

# typer vendors click in some releases and depends on it in others: find click's classes by name.
_CLICK = {c.__name__: c for c in typer.BadParameter.__mro__}
ClickException = _CLICK["ClickException"]
UsageError = _CLICK["UsageError"]


def emit(doc: dict) -> None:
    """One strict JSON object on stdout (NaN and ±inf written as null)."""
    sys.stdout.write(dumps(doc) + "\n")


def warn(text: str) -> None:
    """A warning on stderr: one line, the text shown literally (no rich markup from file names)."""
    from rich.text import Text

    err.print(Text.assemble(("warning:", "yellow"), " ", printable(text)), highlight=False, soft_wrap=True)


def _error(line: str, code: int = 2) -> None:
    sys.stderr.write(f"xstage-trace: error: {printable(line)}\n")
    sys.exit(code)


def _terminate(signum, frame) -> None:
    """SIGTERM unwinds like an exception, so temporary output is removed on the way out."""
    raise SystemExit(128 + signum)


def main(fast_exit: bool = False) -> None:
    """Entry point: bad input and usage errors become one line on stderr and exit code 2. ``fast_exit``
    (the console script and ``python -m xstage_trace``: ``entry``): after a command returned, the process
    ends without the interpreter's teardown (``_finish``)."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        rv = app(standalone_mode=False)
    except InputError as exc:
        _error(exc.one_line())
    except UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare command group: show its help
            sys.stderr.write(exc.format_message().rstrip() + "\n")
            sys.exit(2)
        path = exc.ctx.command_path if exc.ctx is not None else "xstage-trace"
        _error(f"{path}: {exc.format_message()} (see {path} --help)")
    except ClickException as exc:
        _error(exc.format_message(), exc.exit_code)
    except OSError as exc:  # a write that no command path translated (full disk, read-only folder): still one line
        from xstage_trace.base.output import os_error_line

        _error(os_error_line(exc.filename or "output", exc).one_line())
    except (KeyboardInterrupt, typer.Abort):
        _error("interrupted; nothing was written", 130)
    code = rv if isinstance(rv, int) else 0
    if fast_exit:
        _finish(code)
    sys.exit(code)


def entry() -> None:
    """The ``xstage-trace`` console script and ``python -m xstage_trace``: ``main`` ending the process fast, under
    ``process_defaults``."""
    process_defaults()
    main(fast_exit=True)


def process_defaults() -> None:
    """Unless the user chose otherwise, in this process and the worker processes it starts (they inherit the
    environment; it takes effect only before numpy and pyarrow are imported): numpy's OpenBLAS on one thread — no
    command multiplies large matrices, and at numpy's import each extra BLAS thread spins ~0.1 CPU-s before it
    sleeps — and Arrow's C++ allocations from the C library's heap (``ARROW_DEFAULT_MEMORY_POOL=system``, under
    ``base.malloc.keep_freed_memory``'s thresholds where analyze sets them), whose freed memory the next batch reuses
    where mimalloc's purged pages were faulted in again (benchmarks/README.md)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")


def _finish(code: int) -> None:
    """Exit with ``code`` once stdout and stderr are flushed, skipping the interpreter's teardown: freeing
    every object of pandas, pyarrow and the run one by one took 0.3–1 s after the last line
    (benchmarks/README.md), and nothing is left to close by then (worker pools, threads and temporary
    folders are closed by their ``with`` blocks)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: let the usual exit report it
        sys.exit(code)
    os._exit(code)


from xstage_trace.cli import analyze as _analyze, calibrate as _calibrate, instrument as _instrument, model as _model  # noqa: E402,F401  (registers the commands)
from xstage_trace.cli import collection as _collection  # noqa: E402,F401
from xstage_trace.cli import report as _report  # noqa: E402,F401
from xstage_trace.cli import compare as _compare  # noqa: E402,F401
from xstage_trace.cli import export as _export  # noqa: E402,F401
from xstage_trace.cli import dashboard as _dashboard  # noqa: E402,F401
from xstage_trace.cli import store_wait as _store_wait  # noqa: E402,F401
from xstage_trace.cli import piggyback as _piggyback  # noqa: E402,F401
from xstage_trace.cli import tile_error as _tile_error  # noqa: E402,F401
