"""Recipe target `deepgemm_megamoe`."""
