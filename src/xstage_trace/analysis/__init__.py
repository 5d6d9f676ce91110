"""The X-Stage model (docs/xstage-model.md of the specification): pure functions over numpy/pandas/Arrow.

No I/O and no plotting here: collectors/ reads, app/ and the CLI show.
"""
