"""Nsight Systems export → run-dataset tables (kernels, nvtx, gpu_metrics) plus GPU and session info.

Works on SQLite exports from nsys 2022.4 to 2026.x and on parquetdir exports; every optional table
or column is looked up before use, and what is missing is reported as a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from xstage_trace.collectors import nsys_names as N
from xstage_trace.collectors.compressed import ZST_SUFFIX, decompressed_export
from xstage_trace.collectors.nsys_tables import open_tables
from xstage_trace.base.errors import InputError
from xstage_trace.base.schema import conform

UTC_NORMALIZED_THRESHOLD_NS = 10**18  # exports made with --ts-normalize carry UTC epoch ns


@dataclass
class NsysExport:
    """What one nsys export holds, in run-dataset form."""

    path: Path
    kernels: pa.Table
    nvtx: pa.Table
    gpu_metrics: pa.Table
    gpus: list[dict]
    nsys_version: str | None
    schema_version: str | None
    utc_epoch_ns: int | None
    warnings: list[str] = field(default_factory=list)


# Columns nsys writes as integers (timestamps, ids, enums); text or fractional values there mean an
# export this reader does not understand, and are refused rather than misread.
INTEGER_COLUMNS = frozenset({
    "start", "end", "timestamp", "utcEpochNs", "deviceId", "streamId", "shortName", "demangledName", "correlationId",
    "globalPid", "globalTid", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "eventType", "textId", "domainId",
    "id", "typeId", "metricId", "gpuId", "smCount", "numMultiprocessors", "clockRate",
})


def _read(src, table: str, columns: list[str]) -> pa.Table:
    """``src.read`` with the integer columns checked: integers pass, integral floats become int64,
    anything else (text timestamps, fractional ids) is an InputError naming table and column."""
    t = src.read(table, columns)
    for i, name in enumerate(t.column_names):
        col = t.column(i)
        if name not in INTEGER_COLUMNS or pa.types.is_integer(col.type) or pa.types.is_null(col.type):
            continue
        try:
            if not pa.types.is_floating(col.type):
                raise pa.ArrowInvalid("not a number")
            t = t.set_column(i, name, col.cast(pa.int64()))  # safe cast: fails on fractions and NaN
        except pa.ArrowException:
            raise InputError(src.path, f"{table}.{name} holds {col.type} values where nsys writes integers (text timestamps?)",
                             "re-export the report with nsys export --type sqlite (nsys 2022.4 or newer)") from None
    return t


def _strings(src, warnings: list[str]) -> pd.Series:
    if N.STRINGS_TABLE not in src.tables():
        warnings.append(f"{N.STRINGS_TABLE} missing: kernel and NVTX names are unknown (null)")
        return pd.Series(dtype=object)
    t = _read(src, N.STRINGS_TABLE, ["id", "value"]).to_pandas()
    return pd.Series(t["value"].values, index=t["id"].values)


def _export_meta(src) -> dict:
    if N.EXPORT_META_TABLE not in src.tables():
        return {}
    t = src.read(N.EXPORT_META_TABLE, ["name", "value"]).to_pandas()
    return dict(zip(t["name"], t["value"]))


def _session_epoch(src) -> int | None:
    if N.SESSION_TABLE not in src.tables() or "utcEpochNs" not in src.columns(N.SESSION_TABLE):
        return None
    v = _read(src, N.SESSION_TABLE, ["utcEpochNs"]).column(0).to_pylist()
    return int(v[0]) if v and v[0] is not None else None


def _gpus(src, kernel_devices: np.ndarray, warnings: list[str]) -> list[dict]:
    if N.GPU_INFO_TABLE in src.tables():
        cols = [c for c in ("id", "name", "smCount", "clockRate", "l2CacheSize") if c in src.columns(N.GPU_INFO_TABLE)]
        if "id" not in cols:
            raise InputError(src.path, f"{N.GPU_INFO_TABLE} lacks column id (an export of another nsys version?)", "re-export the report with nsys export --type sqlite")
        t = _read(src, N.GPU_INFO_TABLE, cols).to_pandas()
        return [
            {"device_id": int(r["id"]), "name": str(r.get("name", "unknown")),
             "sm_count": int(r["smCount"]) if pd.notna(r.get("smCount")) else None,
             "clock_hz": int(r["clockRate"]) if pd.notna(r.get("clockRate")) else None}
            for _, r in t.iterrows()  # one row per GPU, not per event
        ]
    warnings.append(f"{N.GPU_INFO_TABLE} missing: GPU names unknown")
    if N.CUDA_DEVICE_TABLE in src.tables() and {"gpuId", "numMultiprocessors"} <= set(src.columns(N.CUDA_DEVICE_TABLE)):
        t = _read(src, N.CUDA_DEVICE_TABLE, ["gpuId", "numMultiprocessors"]).to_pandas()
        return [{"device_id": int(g), "name": "unknown", "sm_count": int(s), "clock_hz": None} for g, s in zip(t.gpuId, t.numMultiprocessors)]
    return [{"device_id": int(d), "name": "unknown", "sm_count": None, "clock_hz": None} for d in np.unique(kernel_devices)]


NVTX_COLUMNS = ["rank", "name", "domain", "start_ns", "end_ns", "start_utc_ns", "event_type", "global_tid", "domain_id"]


def _domain_names(rows: pd.DataFrame, names: pd.Series, ranges: np.ndarray, warnings: list[str]) -> np.ndarray:
    """Domain name of each range row (``ranges`` selects them in ``rows``): the name its process gave
    ``domainId`` in an NvtxDomainCreate event (domain ids are per process, as nsys assigns them);
    None for the default domain (id 0) and for ids no create event names (warned)."""
    out = np.full(int(ranges.sum()), None, dtype=object)
    if "domainId" not in rows:
        return out
    pid = N.pid_of_tid(rows["globalTid"].fillna(-1).astype(np.int64)) if "globalTid" in rows else pd.Series(0, index=rows.index)
    keyed = pd.DataFrame({"pid": pid.to_numpy(), "domain_id": rows["domainId"].to_numpy(), "name": names.to_numpy()})
    created = keyed[(rows["eventType"] == N.NVTX_DOMAIN_CREATE).to_numpy()].dropna(subset=["domain_id", "name"])
    created = created.drop_duplicates(["pid", "domain_id"]).rename(columns={"name": "domain"})
    own = keyed[ranges].reset_index(drop=True)
    named = own["domain_id"].notna().to_numpy() & (own["domain_id"] != N.NVTX_DEFAULT_DOMAIN_ID).to_numpy()
    if not named.any():
        return out
    found = own.merge(created, on=["pid", "domain_id"], how="left")["domain"].to_numpy(dtype=object)  # left merge keeps row order
    out[named] = found[named]
    unnamed = named & pd.isna(out)
    if unnamed.any():
        ids = sorted({int(i) for i in own["domain_id"][unnamed]})
        warnings.append(f"{int(unnamed.sum())} NVTX ranges are in domain ids {ids[:5]} that no NvtxDomainCreate event of their process "
                        "names (domain created before the capture began?): their domain is null, domain_id keeps the id")
    return out


def _nvtx(src, strings: pd.Series, rank: int, to_utc, shift: int, warnings: list[str]) -> pd.DataFrame:
    """NVTX push/pop and start/end ranges with their names (inline ``text`` or registered ``textId``)
    and domain names (None = the default domain)."""
    cols_have = src.columns(N.NVTX_TABLE)
    empty = pd.DataFrame(columns=NVTX_COLUMNS)
    if not cols_have:
        warnings.append("no NVTX ranges in this export (capture with -t cuda,nvtx to attribute kernels to ranges)")
        return empty
    lacking = [c for c in ("start", "end", "eventType") if c not in cols_have]
    if lacking:
        warnings.append(f"{N.NVTX_TABLE} lacks {', '.join(lacking)} (another nsys version?): NVTX ranges not read")
        return empty
    want = [c for c in ("start", "end", "eventType", "text", "textId", "globalTid", "domainId") if c in cols_have]
    rows = _read(src, N.NVTX_TABLE, want).to_pandas()
    names = rows["text"] if "text" in rows else pd.Series(None, index=rows.index, dtype=object)
    if "textId" in rows:
        names = names.where(names.notna(), rows["textId"].map(strings))
    ranges = (rows["eventType"].isin(N.NVTX_RANGE_TYPES) & rows["start"].notna() & rows["end"].notna()).to_numpy()
    domain = _domain_names(rows, names, ranges, warnings)
    t = rows[ranges]
    start = t["start"].astype(np.int64) - shift
    return pd.DataFrame(
        {
            "rank": rank,
            "name": names[ranges].values,
            "domain": domain,
            "start_ns": start.values,
            "end_ns": t["end"].astype(np.int64).values - shift,
            "start_utc_ns": to_utc(start.values),
            "event_type": t["eventType"].astype(np.int32).values,
            "global_tid": t["globalTid"].values if "globalTid" in t else None,
            "domain_id": t["domainId"].values if "domainId" in t else None,
        },
        columns=NVTX_COLUMNS,
    ).sort_values("start_ns", kind="stable")


def _innermost_range(ranges: pd.DataFrame, tid: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """Index (into ``ranges``) of the innermost range on thread ``tid`` containing ``t_ns``; -1 if none.

    Ranges sorted by start; the candidate is the latest range started at or before t; while it has
    ended before t, step to its parent (pointer jumping, as many rounds as the nesting is deep).
    """
    out = np.full(len(t_ns), -1, dtype=np.int64)
    if len(ranges) == 0 or len(t_ns) == 0:
        return out
    r = ranges.reset_index(drop=True)
    for thread, grp in r.groupby("global_tid", sort=False):  # one group per CPU thread
        idx = grp.index.to_numpy()
        start = grp["start_ns"].to_numpy()
        end = grp["end_ns"].to_numpy()
        parent = np.arange(len(idx)) - 1
        while True:  # parent = nearest earlier range that is still open at this range's start
            pe = np.where(parent >= 0, end[np.maximum(parent, 0)], np.iinfo(np.int64).max)
            step = (parent >= 0) & (pe < start)
            if not step.any():
                break
            parent = np.where(step, parent[np.maximum(parent, 0)], parent)
        sel = tid == thread
        cand = np.searchsorted(start, t_ns[sel], side="right") - 1
        tt = t_ns[sel]
        while True:
            ce = np.where(cand >= 0, end[np.maximum(cand, 0)], np.iinfo(np.int64).max)
            step = (cand >= 0) & (ce < tt)
            if not step.any():
                break
            cand = np.where(step, parent[np.maximum(cand, 0)], cand)
        out[sel] = np.where(cand >= 0, idx[np.maximum(cand, 0)], -1)
    return out


def _kernels(src, strings: pd.Series, rank: int, to_utc, shift: int, nvtx: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    have = src.columns(N.KERNEL_TABLE)
    missing = [c for c in N.KERNEL_CORE_COLUMNS if c not in have]
    if missing:
        raise InputError(src.path, f"kernel table lacks {', '.join(missing)} (nsys schema older than 2022.4?)", "re-export the report with nsys 2022.4 or newer")
    cols = list(N.KERNEL_CORE_COLUMNS) + [c for c in N.KERNEL_OPTIONAL_COLUMNS if c in have]
    k = _read(src, N.KERNEL_TABLE, cols).to_pandas()
    holes = [c for c in ("start", "end", "deviceId", "streamId") if k[c].isna().any()]
    if holes:
        raise InputError(src.path, f"{N.KERNEL_TABLE} has kernels without {', '.join(holes)}", "re-export the report with nsys export --type sqlite")
    start = k["start"].astype(np.int64).to_numpy() - shift
    df = pd.DataFrame(
        {
            "rank": rank,
            "device_id": k["deviceId"].astype(np.int32).values,
            "name": k["demangledName"].map(strings).values,
            "short_name": k["shortName"].map(strings).values,
            "start_ns": start,
            "end_ns": k["end"].astype(np.int64).values - shift,
            "duration_ns": (k["end"] - k["start"]).astype(np.int64).values,
            "start_utc_ns": to_utc(start),
            "stream_id": k["streamId"].astype(np.int32).values,
        }
    )
    unnamed = int(df["name"].isna().sum())
    if unnamed and len(strings):
        warnings.append(f"{unnamed} kernels name a string id that {N.STRINGS_TABLE} lacks: their names are null")
    for c_src, c_dst in (("correlationId", "correlation_id"), ("gridX", "grid_x"), ("gridY", "grid_y"), ("gridZ", "grid_z"),
                         ("blockX", "block_x"), ("blockY", "block_y"), ("blockZ", "block_z")):
        if c_src in k:
            df[c_dst] = k[c_src].values
    df["nvtx_range"] = df["nvtx_domain"] = None
    runtime_ok = N.RUNTIME_TABLE in src.tables() and {"correlationId", "start", "globalTid"} <= set(src.columns(N.RUNTIME_TABLE))
    if "correlation_id" in df and runtime_ok:
        rt = _read(src, N.RUNTIME_TABLE, ["correlationId", "start", "globalTid"]).to_pandas()
        # correlationId restarts in every process: join on (process, correlationId).
        use_pid = "globalPid" in k
        keys = ["pid", "correlationId"] if use_pid else ["correlationId"]
        rt["pid"] = N.pid_of_tid(rt["globalTid"].astype(np.int64))
        rt = rt.drop_duplicates(keys)
        launch = pd.DataFrame({"correlationId": k["correlationId"].to_numpy()})
        if use_pid:
            launch["pid"] = k["globalPid"].astype(np.int64).to_numpy()
        launch = launch.merge(rt, on=keys, how="left")
        launch_t, launch_tid = launch["start"] - shift, launch["globalTid"]
        df["launch_ns"] = launch_t.astype("Int64").array  # the CUDA runtime call that launched the kernel
        df["launch_global_tid"] = launch_tid.astype("Int64").array
        ok = launch_t.notna().to_numpy()
        if len(nvtx):
            ranges = nvtx.reset_index(drop=True)
            where = np.full(len(df), -1)
            where[ok] = _innermost_range(ranges, launch_tid[ok].astype(np.int64).to_numpy(), launch_t[ok].astype(np.int64).to_numpy())
            for col, src_col in (("nvtx_range", "name"), ("nvtx_domain", "domain")):
                values = ranges[src_col].to_numpy(dtype=object)
                df[col] = np.where(where >= 0, values[np.maximum(where, 0)], None)
    elif len(nvtx):
        warnings.append(f"{N.RUNTIME_TABLE} missing or without correlationId/start/globalTid: kernels not attributed to NVTX ranges")
    return df.sort_values("start_ns", kind="stable")


def _pair_keys(t_names: np.ndarray, m_names: np.ndarray, t_rows: np.ndarray, m_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(typeId, metricId) pairs of the name table and the samples → one int64 key each, equal iff the
    pairs are equal: typeId·(max metricId + 1) + metricId when that cannot overflow int64 (real
    exports), else dense codes of both ids (ids from an edited export can be anything)."""
    base = int(m_names.max()) + 1
    t_max = int(max(np.abs(t_names).max(), np.abs(t_rows).max() if len(t_rows) else 0))
    if m_names.min() >= 0 and (len(m_rows) == 0 or (m_rows.min() >= 0 and m_rows.max() < base)) and (t_max + 1) * base < 2**62:
        return t_names * base + m_names, t_rows * base + m_rows
    _, t_code = np.unique(np.concatenate([t_names, t_rows]), return_inverse=True)
    m_uni, m_code = np.unique(np.concatenate([m_names, m_rows]), return_inverse=True)
    key = t_code.astype(np.int64) * len(m_uni) + m_code
    return key[: len(t_names)], key[len(t_names):]


def _gpu_metrics(src, rank: int, shift: int, warnings: list[str]) -> pa.Table:
    if N.METRICS_TABLE in src.tables() and N.METRIC_NAMES_TABLE not in src.tables():
        warnings.append(f"{N.METRIC_NAMES_TABLE} missing: GPU metric names unknown, {N.METRICS_TABLE} samples dropped")
        return conform("gpu_metrics", pa.table({}))
    if N.METRICS_TABLE not in src.tables():
        warnings.append("no GPU metrics in this export (capture with --gpu-metrics-devices=all for SM/Tensor Active)")
        return conform("gpu_metrics", pa.table({}))
    names = _read(src, N.METRIC_NAMES_TABLE, ["typeId", "metricId", "metricName"]).to_pandas().drop_duplicates(["typeId", "metricId"])
    m = _read(src, N.METRICS_TABLE, ["timestamp", "typeId", "metricId", "value"])
    m = m.filter(pc.is_valid(m["timestamp"]))
    if m.num_rows and not (pa.types.is_integer(m["value"].type) or pa.types.is_floating(m["value"].type)):
        raise InputError(src.path, f"{N.METRICS_TABLE}.value holds {m['value'].type} values, not numbers", "re-export the report with nsys export --type sqlite")
    if m.num_rows == 0 or names.empty:
        if m.num_rows:
            warnings.append(f"{m.num_rows} GPU-metric samples but {N.METRIC_NAMES_TABLE} is empty: samples dropped (metric names unknown)")
        else:
            warnings.append(f"{N.METRICS_TABLE} is empty: no GPU metric samples in this export")
        return conform("gpu_metrics", pa.table({}))
    # Join on (typeId, metricId): metricId alone is "not assumed to be stable" across types.
    key_names, key_rows = _pair_keys(names["typeId"].to_numpy(np.int64), names["metricId"].to_numpy(np.int64),
                                     m["typeId"].to_numpy().astype(np.int64), m["metricId"].to_numpy().astype(np.int64))
    order = np.argsort(key_names)
    pos = np.searchsorted(key_names[order], key_rows)
    pos = np.minimum(pos, len(order) - 1)
    found = key_names[order][pos] == key_rows
    raw_names = names["metricName"].to_numpy(dtype=object)[order]
    raw_dict = pa.array(list(raw_names), pa.string())
    norm_list = [N.normalize_metric(n) for n in raw_names]  # one per metric name, not per sample
    norm_unique = sorted(set(norm_list))
    norm_idx = np.array([norm_unique.index(n) for n in norm_list], dtype=np.int32)
    if not found.all():
        warnings.append(f"{int((~found).sum())} GPU-metric samples had no name in {N.METRIC_NAMES_TABLE}; dropped")
    pos = pos[found]
    m = m.filter(pa.array(found))
    return conform(
        "gpu_metrics",
        pa.table(
            {
                "rank": pa.array(np.full(len(pos), rank, np.int32)),
                "device_id": pa.array(N.device_of_type_id(m["typeId"].to_numpy().astype(np.int64)).astype(np.int32)),
                "metric": pa.DictionaryArray.from_arrays(pa.array(norm_idx[pos]), pa.array(norm_unique, pa.string())),
                "metric_raw": pa.DictionaryArray.from_arrays(pa.array(pos.astype(np.int32)), raw_dict),
                "timestamp_ns": pc.subtract(m["timestamp"].cast(pa.int64()), shift),
                "value": m["value"].cast(pa.float64()),
            }
        ),
    )


def read_nsys_export(path: str | Path) -> NsysExport:
    """Read an nsys SQLite or parquetdir export into run-dataset tables (session-relative ns + UTC);
    a damaged file (pages SQLite cannot read, text that is not UTF-8, values Arrow cannot hold) is an
    InputError naming it. What one export file holds is read once and then from the user cache
    (collectors/export_cache.py: keyed by its content and the reader's code)."""
    import sqlite3

    from dataclasses import fields as fields_of

    from xstage_trace.collectors.export_cache import cached_fields

    def read(p: Path) -> dict:
        e = _read_nsys_export(p)
        return {f.name: getattr(e, f.name) for f in fields_of(e) if f.name != "path"}

    try:
        fields = cached_fields(Path(path), read)
    except (sqlite3.Error, UnicodeDecodeError, OverflowError, pa.ArrowException) as exc:
        raise InputError(path, f"not a readable Nsight Systems export ({exc.__class__.__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''})",
                         "export the report again with: nsys export --type sqlite REPORT.nsys-rep") from None
    return NsysExport(path=Path(path), **fields)


def _read_nsys_export(path: Path) -> NsysExport:
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or folder", "check the path")
    src = open_tables(decompressed_export(path) if path.name.endswith(ZST_SUFFIX) else path)
    try:
        warnings: list[str] = []
        meta = _export_meta(src)
        if not meta and N.KERNEL_TABLE not in src.tables() and N.STRINGS_TABLE not in src.tables():
            raise InputError(path, "not an Nsight Systems export (no META_DATA_EXPORT, StringIds or kernel table)", "export the report with: nsys export --type sqlite REPORT.nsys-rep")
        if not meta:
            warnings.append(f"{path.name}: no META_DATA_EXPORT (nsys 2022.4 or older); schema version unknown")
        if N.KERNEL_TABLE not in src.tables():
            raise InputError(path, "export has no kernels (CUPTI_ACTIVITY_KIND_KERNEL missing)", "capture with nsys profile -t cuda,nvtx so GPU kernels are traced")
        strings = _strings(src, warnings)
        epoch = _session_epoch(src)
        if "start" not in src.columns(N.KERNEL_TABLE):
            raise InputError(path, f"{N.KERNEL_TABLE} lacks column start (nsys schema older than 2022.4?)", "re-export the report with nsys 2022.4 or newer")
        k_start = _read(src, N.KERNEL_TABLE, ["start"]).column(0)
        if k_start.length() == 0:
            raise InputError(path, "export has no kernels (kernel table is empty)", "capture a run that launches GPU kernels, with nsys profile -t cuda")
        first_ns = pc.min(k_start).as_py()
        if first_ns is None:
            raise InputError(path, f"{N.KERNEL_TABLE} has kernels without start", "re-export the report with nsys export --type sqlite")
        normalized = int(first_ns) > UTC_NORMALIZED_THRESHOLD_NS
        if epoch is None:
            warnings.append(f"{N.SESSION_TABLE} missing: UTC times unknown, probe alignment falls back to per-kernel offsets")
        # --ts-normalize exports store UTC ns; shift them back so *_ns is session-relative everywhere.
        shift = (epoch or 0) if normalized else 0
        if normalized:
            warnings.append(f"{path.name}: export made with --ts-normalize (UTC timestamps); converted to session-relative")
        to_utc = (lambda a: a + epoch) if epoch is not None else (lambda a: np.full(len(a), None))
        nvtx = _nvtx(src, strings, 0, to_utc, shift, warnings)  # rank 0: collect gives each export its rank
        kernels = _kernels(src, strings, 0, to_utc, shift, nvtx, warnings)
        metrics = _gpu_metrics(src, 0, shift, warnings)
        gpus = _gpus(src, kernels["device_id"].to_numpy(), warnings)
    finally:
        src.close()
    return NsysExport(
        path=path,
        kernels=conform("kernels", pa.Table.from_pandas(kernels, preserve_index=False)),
        nvtx=conform("nvtx", pa.Table.from_pandas(nvtx, preserve_index=False)),
        gpu_metrics=metrics,
        gpus=gpus,
        nsys_version=meta.get("EXPORT_PRODUCT_VERSION"),
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        utc_epoch_ns=epoch,
        warnings=warnings,
    )
