"""Schemas of the run dataset's Parquet tables (documented in docs/run-dataset.md).

Time columns: ``*_ns`` are session-relative nanoseconds (nsys time base, 0 = capture start) unless
named ``*_utc_ns`` (UTC epoch ns) or ``*_gt_ns`` (raw %globaltimer ns of the probe's GPU).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 3

KERNELS = pa.schema(
    [
        ("rank", pa.int32()),
        ("device_id", pa.int32()),
        ("name", pa.string()),
        ("short_name", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("start_utc_ns", pa.int64()),
        ("stream_id", pa.int32()),
        ("correlation_id", pa.int64()),
        ("grid_x", pa.int32()),
        ("grid_y", pa.int32()),
        ("grid_z", pa.int32()),
        ("block_x", pa.int32()),
        ("block_y", pa.int32()),
        ("block_z", pa.int32()),
        ("nvtx_range", pa.string()),
        ("nvtx_domain", pa.string()),
        ("launch_ns", pa.int64()),
        ("launch_global_tid", pa.int64()),
    ]
)

NVTX = pa.schema(
    [
        ("rank", pa.int32()),
        ("name", pa.string()),
        ("domain", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("start_utc_ns", pa.int64()),
        ("event_type", pa.int32()),
        ("global_tid", pa.int64()),
        ("domain_id", pa.int64()),
    ]
)

GPU_METRICS = pa.schema(
    [
        ("rank", pa.int32()),
        ("device_id", pa.int32()),
        ("metric", pa.dictionary(pa.int32(), pa.string())),
        ("metric_raw", pa.dictionary(pa.int32(), pa.string())),
        ("timestamp_ns", pa.int64()),
        ("value", pa.float64()),
    ]
)

# A decoded record has every field: the columns are required (Parquet writes no definition levels for them).
PROBES = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("dump", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("slice", pa.int32(), nullable=False),
        pa.field("cta", pa.int32(), nullable=False),
        pa.field("role", pa.int32(), nullable=False),
        pa.field("sm_id", pa.int32(), nullable=False),
        pa.field("event", pa.dictionary(pa.int32(), pa.string()), nullable=False),
        pa.field("event_id", pa.int16(), nullable=False),
        pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("tile", pa.uint32(), nullable=False),
        pa.field("payload", pa.uint32(), nullable=False),
        pa.field("clock", pa.int64(), nullable=False),
        pa.field("t_gt_ns", pa.int64(), nullable=False),
        pa.field("t_ns", pa.float64(), nullable=False),
    ]
)

PROBE_SLICES = pa.schema(
    [
        ("rank", pa.int32()),
        ("dump", pa.string()),
        ("label", pa.string()),
        ("slice", pa.int32()),
        ("cta", pa.int32()),
        ("role", pa.int32()),
        ("sm_id", pa.int32()),
        ("records_stored", pa.int64()),
        ("records_dropped", pa.int64()),
        ("closed", pa.bool_()),
        ("open_gt_ns", pa.int64()),
        ("close_gt_ns", pa.int64()),
        ("ns_per_cycle", pa.float64()),
    ]
)

# One row per probe dump: where it ran and its typed run configuration (base/config.py).
DUMPS = pa.schema(
    [
        ("rank", pa.int32()),
        ("dump", pa.string()),
        ("device_index", pa.int32()),
        ("gpu_name", pa.string()),
        ("sm_count", pa.int32()),
        ("label", pa.string()),
        ("kernel", pa.string()),
        ("dest", pa.string()),
        ("shape", pa.string()),
        ("schedule", pa.string()),
        ("variant", pa.string()),
        ("layout", pa.string()),
        ("operands", pa.string()),
        ("epilogue", pa.string()),
        ("mode", pa.string()),
        ("K", pa.int64()),
        ("B", pa.int64()),
        ("gap_ns", pa.float64()),
        ("bursts", pa.int64()),
        ("threads", pa.int64()),
        ("store", pa.string()),
        ("store_bytes", pa.int64()),
        ("k1", pa.int64()),
        ("k2", pa.int64()),
        ("tiles", pa.int64()),
        ("l2_tiles", pa.int64()),
        ("ctas", pa.int64()),
        ("lead_rows", pa.int64()),
        ("control", pa.int64()),
        ("trial", pa.int64()),
        ("is_control", pa.bool_()),
        ("extra", pa.string()),
        ("kernel_index", pa.int64()),
    ]
)

# Configuration columns copied from DUMPS onto the per-tile and per-burst tables (results are grouped by them).
CONFIG_COLUMNS = ("dest", "shape", "schedule", "variant")
CONFIG_FIELDS = [(c, pa.string()) for c in CONFIG_COLUMNS]

BURSTS = pa.schema(
    [
        ("rank", pa.int32()),
        ("dump", pa.string()),
        *CONFIG_FIELDS,
        ("burst", pa.int64()),
        ("start_ns", pa.float64()),
        ("end_ns", pa.float64()),
        ("volume_bytes", pa.float64()),
        ("producers", pa.int32()),
        ("issue_ns", pa.float64()),
        ("issue_floor_ns", pa.float64()),
        ("gap_ns", pa.float64()),
        ("rho", pa.float64()),
        ("delta_b_bytes", pa.float64()),
        ("q_bytes", pa.float64()),
        ("b_iso_bytes", pa.float64()),
        ("guard_ok", pa.bool_()),
    ]
)

TILES = pa.schema(
    [
        ("rank", pa.int32()),
        ("dump", pa.string()),
        *CONFIG_FIELDS,
        ("cta", pa.int32()),
        ("position", pa.int32()),
        ("tile", pa.int64()),
        ("tile_kind", pa.string()),
        ("expert", pa.int32()),
        ("wave", pa.int32()),
        ("mainloop_ns", pa.float64()),
        ("rs_span_ns", pa.float64()),
        ("epilogue_span_ns", pa.float64()),
        ("cover_ns", pa.float64()),
        ("epilogue_lead_ns", pa.float64()),
        ("predicted_stall_ns", pa.float64()),
        ("slot_wait_ns", pa.float64()),
        ("wait_floor_ns", pa.float64()),
        ("measured_stall_ns", pa.float64()),
        ("noise_ns", pa.float64()),
        ("backpressured", pa.bool_()),
        ("control_mainloop_ns", pa.float64()),
        ("control_compute_ns", pa.float64()),
        ("control_epilogue_ns", pa.float64()),
        ("ns_per_cycle", pa.float64()),
        ("rs_bytes", pa.float64()),
        ("load_steps", pa.int32()),
        ("load_stages", pa.int32()),
        ("cover_tiles", pa.int32()),
        ("plain_store", pa.bool_()),
        ("compute_stall_ns", pa.float64()),
        ("stall_ns", pa.float64()),
        ("forward_stall_ns", pa.float64()),
        ("diagnosis", pa.string()),
    ]
)


def _field(name: str, type_: pa.DataType, label: str) -> pa.Field:
    """A column with its display label (``label`` in the field metadata; the unit follows from the name)."""
    return pa.field(name, type_, metadata={"label": label})


def _config_key_fields() -> list[pa.Field]:
    """The key of a result row: one configuration (dest, shape, variant) and schedule, with display labels."""
    return [_field("dest", pa.string(), "destination"), _field("shape", pa.string(), "shape"),
            _field("variant", pa.string(), "kernel variant"), _field("schedule", pa.string(), "schedule")]


# Table 3 (docs/model.md §5, §12): one row per configuration and schedule, times in ns like every other table.
TABLE3 = pa.schema(
    [
        *_config_key_fields(),
        _field("tiles", pa.int64(), "remote-store tiles"),
        _field("measured_tiles", pa.int64(), "tiles with a measured stall"),
        _field("stalled_tiles", pa.int64(), "stalled tiles"),
        _field("backpressured_tiles", pa.int64(), "backpressured tiles"),
        _field("inflated_tiles", pa.int64(), "inflated mainloops"),
        _field("inflation_judged_tiles", pa.int64(), "tiles with a control"),
        _field("compute_ns", pa.float64(), "compute span (median)"),
        _field("other_compute_ns", pa.float64(), "local-store tiles' compute span (median)"),
        _field("control_compute_ns", pa.float64(), "control compute span (median)"),
        _field("cover_ns", pa.float64(), "T_cover (median)"),
        _field("store_span_ns", pa.float64(), "store span T_RS (median)"),
        _field("slot_pred_medians_ns", pa.float64(), "slot stall predicted from medians"),
        _field("slot_pred_ns", pa.float64(), "slot stall predicted per tile (median)"),
        _field("slot_meas_ns", pa.float64(), "slot stall measured (median)"),
        _field("slot_err_median_ns", pa.float64(), "slot |pred − meas| (median)"),
        _field("slot_err_mean_ns", pa.float64(), "slot |pred − meas| (mean)"),
        _field("stall_ns", pa.float64(), "measured stall (median)"),
        _field("stall_p99_ns", pa.float64(), "measured stall (p99)"),
        _field("compute_stall_ns", pa.float64(), "compute part of the stall (median)"),
        _field("forward_stall_ns", pa.float64(), "calibrated forward prediction (median)"),
        _field("noise_ns", pa.float64(), "noise floor"),
        _field("kernel_ns", pa.float64(), "kernel time (median of trials, slowest rank)"),
        _field("trials", pa.float64(), "trials"),
        _field("ranks", pa.float64(), "ranks"),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "kernels": KERNELS,
    "nvtx": NVTX,
    "gpu_metrics": GPU_METRICS,
    "probes": PROBES,
    "probe_slices": PROBE_SLICES,
    "dumps": DUMPS,
    "bursts": BURSTS,
    "tiles": TILES,
}
# The verdict per configuration and schedule (docs/model.md §5, §12; analysis/verdict.py).
VERDICTS = pa.schema(
    [
        *_config_key_fields(),
        _field("verdict", pa.string(), "verdict"),
        _field("diagnosis", pa.string(), "cause"),
        _field("basis", pa.string(), "basis"),
        _field("tiles", pa.int64(), "remote-store tiles"),
        _field("stalled_tiles", pa.int64(), "stalled tiles"),
        _field("measured_stall_ns", pa.float64(), "measured stall (median)"),
        _field("measured_stall_p99_ns", pa.float64(), "measured stall (p99)"),
        _field("slot_stall_ns", pa.float64(), "slot part (median)"),
        _field("compute_stall_ns", pa.float64(), "compute part (median)"),
        _field("slot_model_stall_ns", pa.float64(), "slot model Δt (median)"),
        _field("predicted_stall_ns", pa.float64(), "calibrated prediction (median)"),
        _field("kernel_ns", pa.float64(), "kernel time"),
        _field("noise_ns", pa.float64(), "noise floor"),
        _field("model_agrees", pa.bool_(), "model agrees"),
    ]
)

# What-if on a host-mapped path per configuration × alternative (docs/model.md §13; analysis/link_whatif.py).
LINK_WHATIF = pa.schema(
    [
        *_config_key_fields(),
        _field("alternative", pa.string(), "alternative"),
        _field("parameter", pa.float64(), "parameter (CTAs; tiles prefetched)"),
        _field("kernel_ns", pa.float64(), "predicted kernel time"),
        _field("stall_ns", pa.float64(), "predicted stall (median)"),
        _field("gain", pa.float64(), "gain (as run / alternative)"),
    ]
)

# The run's result tables, written as NAME.parquet beside the tables (docs/run-dataset.md).
RESULTS: dict[str, pa.Schema] = {"table3": TABLE3, "verdicts": VERDICTS, "link_whatif": LINK_WHATIF}


def empty_table(name: str) -> pa.Table:
    """An empty table with the named schema."""
    return TABLES[name].empty_table()


def conform(name: str, table: pa.Table) -> pa.Table:
    """Cast ``table`` to the schema of ``name`` (a table or a result; column order and types), filling absent columns with nulls."""
    schema = TABLES[name] if name in TABLES else RESULTS[name]
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(cols, schema=schema)
