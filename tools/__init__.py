"""Developer tools: used by the tests, the benchmarks and whoever changes the probes; not installed
with the package (run from the repository root: ``python -m tools.<name>``)."""
