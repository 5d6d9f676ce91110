"""Recipe targets: one folder per instrumented kernel (recipe, files, record mapping, build scripts)."""
