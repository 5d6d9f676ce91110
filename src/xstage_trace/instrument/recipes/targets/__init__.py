"""One module per target; each defines ``RECIPE``."""
