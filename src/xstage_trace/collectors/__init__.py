"""xstage-trace collectors."""
