"""xstage-trace: profiling and trace analysis for GPU kernels that fuse compute with remote stores.

``xstage_trace.open_run(DIR)`` opens a run dataset for analysis (see ``xstage_trace.api``).
"""

__version__ = "0.1.0"


def open_run(run_dir):
    """Open a run dataset folder written by ``xstage-trace analyze`` (``xstage_trace.api.Run``)."""
    from xstage_trace.api import open_run as _open

    return _open(run_dir)
