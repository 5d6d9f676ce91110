"""xstage-trace: profiling and trace analysis for GPU kernels that fuse compute with remote stores.

``xstage_trace.open_run(DIR)`` opens a run dataset for analysis (see ``xstage_trace.dataset.api``);
``xstage_trace.open_collection(ROOTS)`` many of them as one dataset (``xstage_trace.dataset.collection``).
"""

from xstage_trace.base.version import __version__

__all__ = ["__version__", "open_collection", "open_run"]


def open_run(run_dir):
    """Open a run dataset folder written by ``xstage-trace analyze`` (``xstage_trace.dataset.api.Run``)."""
    from xstage_trace.dataset.api import open_run as _open

    return _open(run_dir)


def open_collection(roots):
    """Open every run folder under ``roots`` as one DuckDB-backed dataset (``xstage_trace.dataset.collection.Collection``)."""
    from xstage_trace.dataset.collection import open_collection as _open

    return _open(roots)
