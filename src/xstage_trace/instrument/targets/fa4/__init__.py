"""Recipe target `fa4`."""
