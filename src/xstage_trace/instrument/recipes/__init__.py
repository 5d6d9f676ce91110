"""Recipes that put xstage probes into upstream kernels (DeepGEMM, FlashAttention, FLUX) in the
user's own tree: ``xstage-trace instrument list | check | apply``. Engine: ``engine.py``; one
module per target under ``targets/``; our adapter files under ``files/<target>/``."""

from __future__ import annotations

from xstage_trace.base.errors import InputError
from xstage_trace.instrument.recipes.model import Recipe
from xstage_trace.instrument.recipes.targets import deepgemm_megamoe, deepgemm_sm90, fa3, fa4, flux

RECIPES: dict[str, Recipe] = {r.name: r for r in (deepgemm_sm90.RECIPE, deepgemm_megamoe.RECIPE, fa3.RECIPE, fa4.RECIPE, flux.RECIPE)}


def get(name: str) -> Recipe:
    """The recipe called ``name``; InputError listing the known targets otherwise."""
    if name not in RECIPES:
        raise InputError(None, f"unknown target {name!r}", f"use one of: {', '.join(RECIPES)}")
    return RECIPES[name]
