"""Recipes that put xstage probes into upstream kernels (DeepGEMM, FlashAttention, FLUX) in the
user's own tree: ``xstage-trace instrument list | check | apply``. The one engine is here
(``engine.py``, ``model.py``, ``flags.py`` and what the two DeepGEMM targets share); each target is a
folder ``instrument/targets/<target>/`` with its ``recipe.py`` (``RECIPE``), its adapter files under
``files/`` and its build scripts."""

from __future__ import annotations

from xstage_trace.base.errors import InputError
from xstage_trace.instrument.recipes.model import Recipe
from xstage_trace.instrument.targets.deepgemm_megamoe import recipe as deepgemm_megamoe
from xstage_trace.instrument.targets.deepgemm_sm90 import recipe as deepgemm_sm90
from xstage_trace.instrument.targets.fa3 import recipe as fa3
from xstage_trace.instrument.targets.fa4 import recipe as fa4
from xstage_trace.instrument.targets.flux import recipe as flux
from xstage_trace.instrument.targets.flux_triton import recipe as flux_triton

RECIPES: dict[str, Recipe] = {r.name: r for r in (deepgemm_sm90.RECIPE, deepgemm_megamoe.RECIPE, fa3.RECIPE, fa4.RECIPE, flux.RECIPE,
                                                  flux_triton.RECIPE)}


def get(name: str) -> Recipe:
    """The recipe called ``name``; InputError listing the known targets otherwise."""
    if name not in RECIPES:
        raise InputError(None, f"unknown target {name!r}", f"use one of: {', '.join(RECIPES)}")
    return RECIPES[name]
