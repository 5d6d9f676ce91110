"""The build environment of a recipe target (``xstage-trace instrument flags --target T``)."""

from __future__ import annotations

from xstage_trace.instrument import include_dir
from xstage_trace.instrument.recipes.model import Recipe


def environment(recipe: Recipe, trace: bool = True) -> dict[str, str]:
    """Variables to export before the target's build or first JIT compile.

    ``{inc}`` in a recipe's flags is the probe include folder, ``{trace}`` becomes
    ``-DXSTAGE_TRACE=1`` (or nothing with ``trace=False``) and ``{on}`` ``1`` (or ``0``); empty
    values are dropped.
    """
    d = "-DXSTAGE_TRACE=1" if trace else ""
    env = {}
    for name, value in recipe.flags.items():
        v = " ".join(value.format(inc=include_dir(), trace=d, on="1" if trace else "0").split())
        if v:
            env[name] = f'"{v}"' if " " in v else v
    return env
