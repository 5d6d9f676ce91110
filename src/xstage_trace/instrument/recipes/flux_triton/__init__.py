"""Recipe for FLUX's Triton GEMM-RS (``python/flux_triton``): make it run on Triton 3.6 and insert
xstage probes, applied to the user's FLUX checkout (FLUX's code is never copied into xstage-trace).

The recipe is data (``recipe.json``): per file the sha256 of the upstream version it was written
for and a list of edits, each an exact ``find`` text that must occur once (replaced by ``replace``)
or a ``replace_all`` rename. Applying keeps the original beside each file as ``FILE.xstage-orig``;
reverting puts it back. Self-contained on purpose (a general recipe engine may replace it)::

    python -m xstage_trace.instrument.recipes.flux_triton apply  /path/to/flux
    python -m xstage_trace.instrument.recipes.flux_triton revert /path/to/flux
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from xstage_trace.base.atomic import atomic_file
from xstage_trace.base.errors import InputError

RECIPE_PATH = Path(__file__).resolve().parent / "recipe.json"
ORIG_SUFFIX = ".xstage-orig"


def load_recipe(path: Path = RECIPE_PATH) -> dict:
    """The recipe as a dict (name, upstream, events, files → {sha256, edits})."""
    return json.loads(path.read_text())


def _patched(path: Path, text: str, edits: list[dict]) -> str:
    for e in edits:
        if "replace_all" in e:
            if e["replace_all"] not in text:
                raise InputError(path, f"recipe rename target {e['replace_all']!r} not found", "check out the FLUX commit the recipe names")
            text = text.replace(e["replace_all"], e["with"])
            continue
        n = text.count(e["find"])
        if n != 1:
            first = e["find"].strip().splitlines()[0]
            raise InputError(path, f"recipe anchor {first!r} found {n} times, expected once ({e['why']})",
                             "check out the FLUX commit the recipe names, or revert an earlier apply")
        text = text.replace(e["find"], e["replace"])
    return text


def apply(checkout: str | Path, recipe: dict | None = None) -> list[Path]:
    """Patch the FLUX checkout in place; returns the files changed. Nothing is written unless every
    file matches its recorded sha256 and every anchor is found exactly once."""
    recipe = recipe or load_recipe()
    root = Path(checkout)
    planned: list[tuple[Path, str, str]] = []
    for rel, spec in recipe["files"].items():
        path = root / rel
        if not path.is_file():
            raise InputError(path, "file of the FLUX checkout not found", f"pass the root of a FLUX checkout at {recipe['upstream']['commit'][:12]}")
        if path.with_name(path.name + ORIG_SUFFIX).exists():
            raise InputError(path, "recipe already applied (the .xstage-orig copy exists)", "revert it first")
        text = path.read_text()
        if hashlib.sha256(text.encode()).hexdigest() != spec["sha256"]:
            raise InputError(path, "file differs from the FLUX version this recipe was written for",
                             f"check out FLUX {recipe['upstream']['commit']}")
        planned.append((path, text, _patched(path, text, spec["edits"])))
    for path, original, patched in planned:
        with atomic_file(path.with_name(path.name + ORIG_SUFFIX), "w") as fh:
            fh.write(original)
        shutil.copymode(path, path.with_name(path.name + ORIG_SUFFIX))
        with atomic_file(path, "w") as fh:
            fh.write(patched)
        shutil.copymode(path.with_name(path.name + ORIG_SUFFIX), path)
    return [p for p, _, _ in planned]


def revert(checkout: str | Path, recipe: dict | None = None) -> list[Path]:
    """Put back the originals saved by :func:`apply`; returns the files restored."""
    recipe = recipe or load_recipe()
    root = Path(checkout)
    paths = [root / rel for rel in recipe["files"]]
    for path in paths:  # all or nothing
        if not path.with_name(path.name + ORIG_SUFFIX).exists():
            raise InputError(path, "recipe not applied here (no .xstage-orig copy)", "apply it first, or pass the checkout it was applied to")
    for path in paths:
        path.with_name(path.name + ORIG_SUFFIX).replace(path)
    return paths
