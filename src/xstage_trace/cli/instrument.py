"""``xstage-trace instrument``: build flags for the CUDA probes, and recipes that put them into
upstream kernels (DeepGEMM, FlashAttention, FLUX) in the user's own tree."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from xstage_trace.cli import app, err, out

instrument_app = typer.Typer(no_args_is_help=True, help="Probe build flags and upstream-kernel recipes.")
app.add_typer(instrument_app, name="instrument")

_TARGET = typer.Option(..., "--target", "-t", help="recipe name (see `instrument list`)")
_SRC = typer.Option(..., "--src", help="root of the upstream checkout (or installed package tree) to patch",
                    file_okay=False)


@instrument_app.command("flags")
def instrument_flags(trace: bool = typer.Option(True, "--trace/--no-trace", help="probes compiled in (default) or out"),
                     target: str = typer.Option(None, "--target", "-t", help="print the build environment of this recipe")):
    """Print the nvcc flags that put the probes into a build (-I and -D); with --target, the
    environment for that project's build or JIT as shell `export` lines."""
    from xstage_trace.instrument import include_dir

    inc = include_dir()
    flags = f"-I{inc}" + (" -DXSTAGE_TRACE=1" if trace else "")
    if target is None:
        out.print(flags, highlight=False, soft_wrap=True)
        err.print(f"include folder: {inc}   (#include <xstage/probe.cuh>, host side <xstage/host.hpp>)")
        return
    from xstage_trace.instrument.recipes import get
    from xstage_trace.instrument.recipes.flags import environment

    recipe = get(target)
    for name, value in environment(recipe, trace).items():
        sys.stdout.write(f"export {name}={value}\n")
    err.print(recipe.build_notes, highlight=False, soft_wrap=True)


@instrument_app.command("list")
def instrument_list():
    """The recipe targets: architectures, verified upstream commits, roles, events and payloads."""
    from xstage_trace.instrument.recipes import RECIPES

    for r in RECIPES.values():
        from rich.text import Text

        out.print(Text.assemble((r.name, "bold"), f"  {r.title}"), highlight=False, soft_wrap=True)
        out.print(f"  architectures: {', '.join(r.architectures)}", highlight=False)
        for u in r.upstream:
            out.print(f"  verified: {u.repo} {u.commit} ({u.date})", highlight=False)
        for role in r.roles:
            out.print(f"  role: {role}", highlight=False, soft_wrap=True)
        for e in r.events:
            payload = f", payload = {e.payload}" if e.payload else ""
            out.print(f"  event {e.id} {e.name} ({e.kind}, {e.role}{payload}): {e.meaning}", highlight=False, soft_wrap=True)
        out.print(f"  anchors: {len(r.anchors)}; trace buffer: {r.buffer_plumbing}", highlight=False, soft_wrap=True)


@instrument_app.command("check")
def instrument_check(target: str = _TARGET, src: Path = _SRC):
    """Locate every anchor of the recipe: file, line and matched statement, or what drifted."""
    from xstage_trace.instrument.recipes import get
    from xstage_trace.instrument.recipes.engine import Drift, locate

    results = locate(get(target), src)
    drift = [r for r in results if isinstance(r, Drift)]
    for r in results:
        if not isinstance(r, Drift):
            out.print(f"ok     {r.describe()}", highlight=False, markup=False, soft_wrap=True)
    for r in drift:
        err.print(f"xstage-trace: error: {src}: {r.describe()}", highlight=False, markup=False, soft_wrap=True)
    if drift:
        err.print(f"{len(drift)} of {len(results)} anchors not found; use a tree at a verified commit "
                  "(`instrument list`) or update the recipe", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    out.print(f"{len(results)} anchors found", highlight=False)


@instrument_app.command("apply")
def instrument_apply(target: str = _TARGET, src: Path = _SRC,
                     dry_run: bool = typer.Option(False, "--dry-run", help="print the unified diff, write nothing"),
                     revert: bool = typer.Option(False, "--revert", help="remove the recipe's code and files (byte-exact)"),
                     trace: bool = typer.Option(True, "--trace/--no-trace",
                                                help="for JIT targets with a switch header: probes in (default) or out")):
    """Insert the recipe's probes (idempotent; writes .xstage-recipe/<target>.diff), or --revert them."""
    from xstage_trace.instrument.recipes import get
    from xstage_trace.instrument.recipes import engine

    recipe = get(target)
    if revert:
        if dry_run:
            err.print("xstage-trace: error: --dry-run and --revert together; use --dry-run alone to see the diff "
                      f"(the applied one is in {Path(src) / '.xstage-recipe' / (target + '.diff')})", highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        rep = engine.revert(recipe, src)
        for w in rep.warnings:
            err.print(f"warning: {w}", highlight=False, soft_wrap=True)
        out.print(f"reverted {target}: {len(rep.restored)} files restored, {len(rep.removed)} added files removed",
                  highlight=False)
        return
    p = engine.plan(recipe, src, trace=trace)
    if dry_run:
        sys.stdout.write(p.diff())
        return
    if not engine.apply(p):
        out.print(f"{target} already applied to {src}: nothing changed", highlight=False)
        return
    out.print(f"applied {target}: {len(p.found)} anchors in {len(p.patched)} files, {len(p.added)} files added; "
              f"diff in {Path(src) / engine.STATE_DIR / (target + '.diff')}", highlight=False, soft_wrap=True)
