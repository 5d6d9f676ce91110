"""Base layer: schemas, errors, atomic writes, hashing, JSON helpers, calibration JSON. Imports nothing above it."""
