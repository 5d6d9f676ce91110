"""Recipe target `flux_triton`."""
