"""Recipe target `fa3`."""
