"""xstage-trace: profiling and trace analysis for GPU kernels that fuse compute with remote stores."""

__version__ = "0.1.0"
