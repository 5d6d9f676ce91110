"""The analyses ``analyze`` runs over a collected run, as a registry of small stateless steps that drives
both the streaming analyze (pipeline/stream.py, pipeline/runner.py) and the in-memory one (``analyze_frames``).

In the manner of HTA's analyzers, each step returns one DataFrame. There are two kinds:

- per-dump steps (``DUMP_ANALYSES``, ``Analysis``) see one batch of dumps' records (pandas), their ``dumps``
  rows and the results of the per-dump steps before them; they run while the dumps stream through
  ``analyze``, one batch in memory at a time, possibly in worker processes. ``keep`` says what becomes of the
  rows: a run-dataset table written part by part (``"table"``), a result sent back and stored whole by the
  runner (``"result"``, in ``file``), or input to later steps only (``"step"``);
- whole-run steps (``RUN_ANALYSES``, ``RunAnalysis``) see the per-dump results of the whole run and its small
  tables (kernels, dumps). ``scope`` says how the stream runs each in bounded memory: per batch once the
  control statistics are known (``"batch"``: the tiles, written part by part), per configuration from that
  configuration's parts (``"configuration"``: Table 3), once from every part's ``reads`` columns (``"run"``),
  or from the results before it (``"results"``: the verdicts); each result is stored as NAME.parquet.

Adding an analysis is adding an entry here (and its schema to ``base/schema``): the stream writes, sends back
and stores what the entry says.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import pandas as pd

from xstage_trace.analysis.columnar import text_codes
from xstage_trace.analysis.platform import PlatformModel
from xstage_trace.base.lifecycle import TileLifecycle, lifecycle_of
from xstage_trace.base.schema import CONFIG_COLUMNS


@dataclass(frozen=True)
class AnalysisContext:
    """What the analyses need beyond the tables: the calibrated platform (and its path-drain link model), the
    noise floor, warm-ups."""

    model: PlatformModel | None = None
    link: object | None = None  # analysis.forward.LinkModel of a path-drain calibration (docs/model.md §11), if it has one
    noise_ns: float | None = None
    warmup_launches: int = 0
    lifecycle: TileLifecycle | None = None  # the one tile lifecycle of the dumps a per-dump step sees (``_steps`` sets it)

    def __post_init__(self):
        if self.warmup_launches < 0:
            raise ValueError("warmup_launches must be >= 0")
        if self.noise_ns is not None and not self.noise_ns >= 0:
            raise ValueError("noise_ns must be >= 0")


KEEP = ("table", "result", "step")
SCOPES = ("batch", "configuration", "run", "results")


@dataclass(frozen=True)
class Analysis:
    """One per-dump step: its output name, the function producing it (``run(probes, slices, dumps, ctx, done)``),
    what becomes of its rows (``keep``, module text), and for a result, the run file it is stored in and the
    columns its rows are sorted by (``file``, ``order``)."""

    name: str
    run: Callable[..., pd.DataFrame]
    keep: str = "table"
    file: str | None = None
    order: tuple[str, ...] = ()

    def __post_init__(self):
        if self.keep not in KEEP:
            raise ValueError(f"analysis {self.name}: keep {self.keep!r} is not one of {KEEP}")


@dataclass(frozen=True)
class RunAnalysis:
    """One whole-run step: ``run(results, tables, ctx)`` over in-memory results (``analyze_frames``), and its
    streamed form by ``scope`` (module text): ``"batch"``: ``streamed(done, dumps, ctx, control)`` per batch
    (``done``: the batch's per-dump results, ``control``: the run's control statistics); ``"configuration"``:
    ``streamed(parts, cap)`` per configuration over the ``reads`` columns of its ``source`` parts (``parts()``
    yields them anew on each call), the configurations' rows then completed by ``finish(rows, tables, ctx)`` — per
    value of its ``split`` column too, where it has one (a configuration of batches is dest, shape and variant; a
    Table 3 row is also one schedule, and a task holds one row's samples, not every schedule's); ``"run"``:
    ``streamed(frame, tables, ctx)`` over the ``reads`` columns of every ``source`` part; ``"results"``: ``run`` itself, over the results before it."""

    name: str
    run: Callable[..., pd.DataFrame]
    scope: str
    source: str = "tiles"
    reads: tuple[str, ...] = ()
    streamed: Callable[..., pd.DataFrame] | None = None
    finish: Callable[..., pd.DataFrame] | None = None
    split: str | None = None

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"analysis {self.name}: scope {self.scope!r} is not one of {SCOPES}")


def _with_config(frame: pd.DataFrame, dumps: pd.DataFrame) -> pd.DataFrame:
    """Copy the configuration columns of each row's dump onto ``frame`` (last, in CONFIG_COLUMNS order; ``frame``, the
    bursts, has no ``is_control`` of its own)."""
    from xstage_trace.analysis.tiles import with_dump_columns

    if frame.empty:
        return frame
    out = with_dump_columns(frame.drop(columns=[c for c in CONFIG_COLUMNS if c in frame]), dumps, list(CONFIG_COLUMNS))
    return out.drop(columns="is_control")


def _calibration_points(probes: pd.DataFrame, slices: pd.DataFrame, dump: pd.DataFrame, ctx: AnalysisContext, done: dict) -> pd.DataFrame:
    from xstage_trace.analysis.calibration_points import calibration_points

    return calibration_points(probes, slices, dump)


def _bursts(probes: pd.DataFrame, slices: pd.DataFrame, dump: pd.DataFrame, ctx: AnalysisContext, done: dict) -> pd.DataFrame:
    from xstage_trace.analysis.bursts import REMOTE_STORE_EVENTS, audit_bursts, reconstruct_bursts, remote_store_spans

    lc = ctx.lifecycle
    store = lc.store_event
    spans = remote_store_spans(probes, REMOTE_STORE_EVENTS + ((store,) if store not in REMOTE_STORE_EVENTS else ()))
    spans["bytes"] = _label_bytes(lc, dump, spans["dump"], spans["bytes"])
    bursts = reconstruct_bursts(spans, done.get("tile_spans"))
    return _with_config(audit_bursts(bursts, ctx.model if _calibrated_for(ctx.model, dump) else None), dump)


def calibrated_models(model: PlatformModel | None, dumps: pd.DataFrame, link: object | None = None) -> dict[str, tuple]:
    """Per destination of ``dumps`` that the run's calibration covers (``_calibrated_for``) the models its forward
    prediction uses: (the platform, the path-drain ``link`` model or None; docs/model.md §4, §11)."""
    if model is None or dumps.empty:
        return {}
    return {str(d): (model, link) for d in pd.unique(dumps["dest"].dropna()) if _calibrated_for(model, dumps[dumps["dest"] == d])}


def _calibrated_for(model: PlatformModel | None, dump: pd.DataFrame) -> bool:
    """A calibration audits only the bursts of its own store path (``peer0to1`` calibrates ``dest=peer``);
    ``dump``: the rows of dumps that share a destination (``analyze_dumps`` groups them so)."""
    if model is None or dump.empty:
        return False
    dest = dump["dest"].iloc[0]
    return dest is None or not model.store_path or str(model.store_path).startswith(str(dest))


def _tile_spans(probes: pd.DataFrame, slices: pd.DataFrame, dump: pd.DataFrame, ctx: AnalysisContext, done: dict) -> pd.DataFrame:
    from xstage_trace.analysis.tiles import tile_spans

    lc = ctx.lifecycle
    spans = tile_spans(probes, lc)
    if len(spans):
        spans["rs_bytes"] = _label_bytes(lc, dump, spans["dump"], spans["rs_bytes"]).where(spans["rs_ns"].notna())
        spans["load_steps"] = _load_steps(lc, dump, spans)
        spans["load_stages"] = np.int8(lc.load_stages)
    return spans


def _load_steps(lc: TileLifecycle, dumps: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """Each tile's operand-load steps (``analysis.stall.load_steps`` under the lifecycle's rule), dump by dump."""
    from xstage_trace.analysis.stall import load_steps

    out = np.ones(len(spans), np.int64)
    if lc.load_steps is None or dumps.empty:
        return out
    shape = _first_per_dump(dumps, "shape") if "shape" in dumps else {}
    extra = _first_per_dump(dumps, "extra") if "extra" in dumps else {}
    names = spans["dump"].astype(str).to_numpy()
    for name in pd.unique(names):  # a few dumps per batch
        at = names == name
        out[at] = load_steps(lc.load_steps, spans["tile"].to_numpy()[at], shape.get(name), extra.get(name))
    return out


def _label_bytes(lc: TileLifecycle, dumps: pd.DataFrame, names: pd.Series, payload_bytes: pd.Series) -> pd.Series:
    """Store bytes per row: the lifecycle's bytes from each dump's label where it takes them from there
    (``TileLifecycle.bytes_from_label``), else the payload's."""
    if not lc.bytes_from_label or dumps.empty:
        return payload_bytes
    per = {str(d): lc.tile_bytes(e) for d, e in zip(dumps["dump"], dumps["extra"] if "extra" in dumps else [None] * len(dumps))}
    label = pd.Series(names.astype(str).map(per).to_numpy(), index=payload_bytes.index, dtype=np.float64)
    return label.fillna(payload_bytes.astype(np.float64))


def _first_per_dump(dumps: pd.DataFrame, column: str) -> dict:
    """dump name (text) → ``column`` of its first row in ``dumps`` (a few rows: a plain dict, not a frame's astype)."""
    out: dict = {}
    for name, value in zip(dumps["dump"].astype(str), dumps[column]):
        out.setdefault(name, value)
    return out


def dump_lifecycles(probes: pd.DataFrame, dumps: pd.DataFrame) -> dict[str, TileLifecycle]:
    """Per dump of ``probes`` (name as text) its tile lifecycle (docs/model.md §12): from its ``kernel=``
    label, else from the wait or store events its records hold (``base.lifecycle.lifecycle_of`` over the
    registry ``instrument.lifecycle.LIFECYCLES``)."""
    from xstage_trace.instrument.lifecycle import LIFECYCLES

    codes, names = text_codes(probes["dump"])
    ecodes, enames = text_codes(probes["event"])
    held = np.bincount(codes.astype(np.int64) * (len(enames) + 1) + ecodes + 1, minlength=len(names) * (len(enames) + 1))
    events: dict[int, set[str]] = {}
    for pair in np.flatnonzero(held):  # a few per dump: its distinct events (code -1, a missing event, lands on slot 0)
        d, e = divmod(int(pair), len(enames) + 1)
        events.setdefault(d, set()).update(enames[e - 1:e] if e else [])
    kernel = _first_per_dump(dumps, "kernel") if "kernel" in dumps else {}
    return {names[d]: lifecycle_of(kernel.get(names[d]), ev, LIFECYCLES) for d, ev in events.items()}


def group_lifecycle(probes: pd.DataFrame, dumps: pd.DataFrame) -> TileLifecycle:
    """The one lifecycle of a group of dumps analysed together (``dump_groups`` groups them so)."""
    found = set(dump_lifecycles(probes, dumps).values())
    if len(found) > 1:
        raise ValueError(f"dumps of several tile lifecycles analysed together: {sorted(lc.name for lc in found)}")
    from xstage_trace.instrument.lifecycle import REFERENCE

    return found.pop() if found else REFERENCE


def _tiles(parts: dict[str, pd.DataFrame], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.tiles import finish_tiles

    return finish_tiles(parts["tile_spans"], tables["dumps"], ctx.noise_ns, models=calibrated_models(ctx.model, tables["dumps"], ctx.link))


def _tiles_of_batch(done: dict[str, pd.DataFrame], dumps: pd.DataFrame, ctx: AnalysisContext, control) -> pd.DataFrame:
    from xstage_trace.analysis.tiles import finish_tiles

    spans = done.get("tile_spans", pd.DataFrame())
    return finish_tiles(spans, dumps, ctx.noise_ns, control, calibrated_models(ctx.model, dumps, ctx.link)) if len(spans) else pd.DataFrame()


def _table3(parts: dict[str, pd.DataFrame], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.stall import attach_kernel_times, kernel_trials, table3_from_tiles

    if parts["tiles"].empty:
        return pd.DataFrame()
    trials = kernel_trials(tables["kernels"], tables["dumps"], ctx.warmup_launches)
    return attach_kernel_times(table3_from_tiles(parts["tiles"]), trials)


def _table3_of_parts(parts, cap: int) -> pd.DataFrame:
    from xstage_trace.analysis.stall import table3_from_parts

    return table3_from_parts(parts, cap)


def _table3_finish(rows: list[pd.DataFrame], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    """The configurations' Table 3 rows in Table 3's order, with the kernel times."""
    from xstage_trace.analysis.stall import TABLE3_KEYS, attach_kernel_times, kernel_trials

    rows = [r for r in rows if len(r)]
    if not rows:
        return pd.DataFrame()
    table3 = pd.concat(rows, ignore_index=True).sort_values(TABLE3_KEYS, kind="stable").reset_index(drop=True)
    return attach_kernel_times(table3, kernel_trials(tables["kernels"], tables["dumps"], ctx.warmup_launches))


def _verdicts(parts: dict[str, pd.DataFrame], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.verdict import config_verdicts

    return config_verdicts(parts["table3"]) if len(parts.get("table3", ())) else pd.DataFrame()


def _link_whatif(parts: dict[str, pd.DataFrame], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.link_whatif import run_whatifs

    return run_whatifs(parts["tiles"], tables["dumps"], ctx.link)


def _link_whatif_of_parts(read: Callable[[], pd.DataFrame], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> pd.DataFrame:
    from xstage_trace.analysis.link_whatif import run_whatifs

    if ctx.link is None:  # nothing to predict with: the parts are not read
        return pd.DataFrame()
    tiles = read()
    return run_whatifs(tiles, tables["dumps"], ctx.link) if len(tiles) else pd.DataFrame()


# What the per-dump steps read of the probe_slices table: calibration points take the median ns_per_cycle of a
# dump's slices, so the plan's slice summary (one row per dump holding that median) reads the same.
SLICE_COLUMNS = ["rank", "dump", "ns_per_cycle"]
TABLE3_READS = ("dest", "shape", "variant", "schedule", "mainloop_ns", "cover_ns", "rs_span_ns", "predicted_stall_ns",
                "measured_stall_ns", "backpressured", "noise_ns", "control_mainloop_ns", "control_compute_ns", "compute_stall_ns",
                "stall_ns", "forward_stall_ns")  # what table3_from_tiles reads
WHATIF_READS = ("rank", "dump", "dest", "shape", "variant", "schedule", "cta", "position", "control_compute_ns",
                "control_epilogue_ns", "rs_bytes", "load_steps", "load_stages", "cover_tiles", "plain_store")  # what analysis.link_whatif.run_whatifs reads
DUMP_ANALYSES: tuple[Analysis, ...] = (  # in order: a step sees the results of the steps above it
    Analysis("calibration_points", _calibration_points, keep="result", file="calibration_points.csv",
             order=("dest", "mode", "K", "B", "gap_ns")),
    Analysis("tile_spans", _tile_spans, keep="step"),
    Analysis("bursts", _bursts, keep="table"),
)
RUN_ANALYSES: tuple[RunAnalysis, ...] = (  # in order: a step sees the results of the steps above it
    RunAnalysis("tiles", _tiles, scope="batch", streamed=_tiles_of_batch),
    RunAnalysis("table3", _table3, scope="configuration", reads=TABLE3_READS, streamed=_table3_of_parts, finish=_table3_finish,
                split="schedule"),
    RunAnalysis("verdicts", _verdicts, scope="results"),
    RunAnalysis("link_whatif", _link_whatif, scope="run", reads=WHATIF_READS, streamed=_link_whatif_of_parts),
)


def run_analysis(name: str) -> RunAnalysis:
    """The registered whole-run step ``name`` (worker tasks name their step: a registry entry is not pickled)."""
    return next(a for a in RUN_ANALYSES if a.name == name)


def _steps(probes: pd.DataFrame, slices: pd.DataFrame, dumps: pd.DataFrame, ctx: AnalysisContext,
           lifecycle: TileLifecycle | None = None) -> dict[str, pd.DataFrame]:
    """Every per-dump step in order over one group of dumps; ``lifecycle``: the group's, when its caller found it."""
    ctx = replace(ctx, lifecycle=lifecycle or group_lifecycle(probes, dumps))
    done: dict[str, pd.DataFrame] = {}
    for a in DUMP_ANALYSES:
        done[a.name] = a.run(probes, slices, dumps, ctx, done)
    return done


def analyze_dumps(probes: pd.DataFrame, slices: pd.DataFrame, dumps: pd.DataFrame, ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """Every per-dump step over the records of one or more dumps (``dumps``: their rows of the ``dumps``
    table). Every step keys its rows by (rank, dump), so dumps analysed together give what each gives
    alone; what a step decides once for all its input (the staging layout of the records' events, the
    destination a calibration applies to) is the same within each group of dumps run together here."""
    if probes.empty:
        return {}
    groups = dump_groups(probes, dumps)
    if len(groups) == 1:
        return _steps(probes, slices, dumps, ctx, groups[0][2])
    parts = [_steps(probes[p], slices[slices["dump"].astype(str).isin(names)], dumps[dumps["dump"].astype(str).isin(names)], ctx, lc)
             for names, p, lc in groups]
    return {a.name: pd.concat([r[a.name] for r in parts if len(r[a.name])], ignore_index=True)
            if any(len(r[a.name]) for r in parts) else pd.DataFrame() for a in DUMP_ANALYSES}


def dump_groups(probes: pd.DataFrame, dumps: pd.DataFrame) -> list[tuple[list[str], np.ndarray, TileLifecycle]]:
    """The dumps of ``probes`` grouped by (tile lifecycle, destination), each group as (its dump names,
    the mask of its records, its lifecycle), in the order of the dump names."""
    codes, names = text_codes(probes["dump"])
    held = np.flatnonzero(np.bincount(codes, minlength=len(names)))
    lifecycles = dump_lifecycles(probes, dumps)  # every dump that holds records has one (a registry entry)
    dest = _first_per_dump(dumps, "dest")
    by_key: dict[tuple, list[int]] = {}
    for i in held:
        by_key.setdefault((lifecycles[names[i]], str(dest.get(names[i]))), []).append(i)
    one = len(by_key) == 1  # every record: no mask to compute
    return [([names[i] for i in ids], np.ones(len(probes), bool) if one else np.isin(codes, ids), lc) for (lc, _), ids in by_key.items()]


def analyze_dump(probes: pd.DataFrame, slices: pd.DataFrame, dump: pd.DataFrame, ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """Every per-dump step over one dump's records (``dump``: its row of the ``dumps`` table)."""
    if probes.empty:
        return {}
    return _steps(probes, slices, dump, ctx)


def analyze_run(per_dump: list[dict[str, pd.DataFrame]], tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """Concatenate the per-dump results, then run every whole-run step (later steps see earlier results)."""
    out = {}
    for a in DUMP_ANALYSES:
        frames = [d[a.name] for d in per_dump if a.name in d and len(d[a.name])]
        out[a.name] = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if all(v.empty for v in out.values()):
        return out
    for a in RUN_ANALYSES:
        out[a.name] = a.run(out, tables, ctx)
    return out


def analyze_frames(tables: dict[str, pd.DataFrame], ctx: AnalysisContext) -> dict[str, pd.DataFrame]:
    """Both kinds over in-memory tables (``probes``, ``probe_slices``, ``dumps``, ``kernels``), dump by dump."""
    p, sl, d = tables["probes"], tables["probe_slices"], tables["dumps"]
    if p.empty:
        return {}
    per_dump = [analyze_dump(g, sl[sl["dump"].astype(str) == name], d[d["dump"].astype(str) == name], ctx)
                for name, g in p.groupby(p["dump"].astype(str), sort=True)]  # one group per dump
    return analyze_run(per_dump, tables, ctx)
