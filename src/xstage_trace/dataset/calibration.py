"""A calibration JSON file read into the platform model the analyses use (collectors/calibration_io.py reads
and checks the file, analysis/calibration_model.py builds the model; docs/model.md §3)."""

from __future__ import annotations

from pathlib import Path

from xstage_trace.analysis.calibration_model import load_platform_from_doc
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.errors import InputError
from xstage_trace.collectors.calibration_io import read_document


def load_platform(path: str | Path) -> PlatformModel:
    """Read a calibration JSON back into a PlatformModel (every number checked before use)."""
    return load_platform_from_doc(read_document(path), path)


def load_platforms(paths, names_of) -> dict[str, PlatformModel]:
    """Each calibration JSON of ``paths`` under every name ``names_of(model)`` gives it (e.g. its store
    path, or the run destinations it calibrates); a name two files claim is bad input, naming the second."""
    models: dict[str, PlatformModel] = {}
    for path in paths:
        model = load_platform(path)
        for name in names_of(model):
            if name in models:
                raise InputError(path, f"is a second calibration for {name!r} (store path {model.store_path!r})",
                                 "pass one --calibration per store path")
            models[name] = model
    return models
