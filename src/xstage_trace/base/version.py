"""The package version: one place, imported by the root package and by the collectors that stamp it into a run's manifest."""

__version__ = "0.1.0"
