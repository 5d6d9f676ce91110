"""The run dataset: the run folder on disk (run_folder), the open_run façade (api) and collections of runs (collection)."""
