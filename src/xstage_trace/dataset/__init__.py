"""The run dataset: the run written in one transaction (run_folder; its file format is base/run_files), the open_run façade (api) and collections of runs (collection)."""
