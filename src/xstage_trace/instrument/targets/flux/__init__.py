"""Recipe target `flux`."""
