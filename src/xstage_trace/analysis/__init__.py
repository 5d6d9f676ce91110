"""The X-Stage model (docs/model.md): pure functions over numpy/pandas/Arrow.

No I/O and no plotting here: collectors/ reads, app/ and the CLI show.
"""
