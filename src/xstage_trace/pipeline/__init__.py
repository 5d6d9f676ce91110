"""The analyze pipeline: the plan and the streamed per-dump work (stream), the analysis registry (analyses), the workers (distributed), and the command functions (runner)."""
