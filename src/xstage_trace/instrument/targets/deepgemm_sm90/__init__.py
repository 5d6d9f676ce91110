"""Recipe target `deepgemm_sm90`."""
