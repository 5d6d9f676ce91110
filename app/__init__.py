"""xstage-trace app."""
