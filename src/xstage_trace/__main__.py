"""``python -m xstage_trace`` runs the CLI."""

from xstage_trace.cli import entry

entry()
