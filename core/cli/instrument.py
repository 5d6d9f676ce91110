"""``xstage-trace instrument``: build flags for the CUDA probes."""

from __future__ import annotations

import typer

from xstage_trace.cli import app, err, out

instrument_app = typer.Typer(no_args_is_help=True, help="Build flags for the CUDA probes.")
app.add_typer(instrument_app, name="instrument")



@instrument_app.command("flags")
def instrument_flags(trace: bool = typer.Option(True, "--trace/--no-trace", help="probes compiled in (default) or out")):
    """Print the nvcc flags that put the probes into a build (-I and -D), and the include folder."""
    from xstage_trace.instrument import include_dir

    inc = include_dir()
    flags = f"-I{inc}" + (" -DXSTAGE_TRACE=1" if trace else "")
    out.print(flags, highlight=False, soft_wrap=True)
    err.print(f"include folder: {inc}   (#include <xstage/probe.cuh>, host side <xstage/host.hpp>)")
