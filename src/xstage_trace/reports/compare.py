"""Regression gate between two runs: per configuration, the change of the median nsys kernel time
against a noise floor from the trial spread, plus the change of stalls and backpressured tiles.

The samples are the runs' trials as Table 3 counts them (``analysis.stall.kernel_trials``: launches
under a probe dump's configuration, the manifest's warm-ups left out), one value per trial: the
slowest rank's kernel time (docs/model.md §10).

Verdict rule (per configuration, kernel time; timing scope: nsys kernel time):

- threshold = max(gate %, noise %), noise % = the larger of the two runs' IQR / median (× 100) over
  their trials;
- 95 % bootstrap interval of the relative change of the median (resampling both runs' trials);
- **regression**: change > +threshold and the interval lies above 0;
- **improvement**: change < −threshold and the interval lies below 0;
- **neutral**: |change| ≤ threshold;
- **inconclusive**: the change exceeds the threshold but the interval contains 0, either run has
  fewer than ``min_trials`` trials, or the configuration is missing from the new run.
A configuration only in the new run is neutral (nothing to compare against).

Intra-kernel rule (``compare_tiles``, per configuration and schedule, timing scope: probe clock per SM;
docs/model.md §12), so that runs with probe dumps but no nsys report can be gated too: the samples are the
configuration's remote-store tiles (pooled over its launches) and the quantities the median and p99 of the
tiles' measured stall, the share of stalled tiles, the median exposed remote-store time (the store span not
covered by compute, [T_RS − T_cover]₊) and the probe records dropped. The same rule as for kernel time on
the absolute change, with the threshold max(gate % of the base value, the quantity's noise floor: the
runs' tile noise floor for times, ``gate`` percentage points for the share, 0 records for drops) and the
bootstrap interval of the change resampling both runs' tiles; drops are counts (no interval): any more
than the base run's is a regression.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from xstage_trace.base.errors import InputError
from xstage_trace.reports.configs import CONFIG_KEYS, run_trials, slowest_rank_trials, tile_configs

VERDICTS = ("regression", "improvement", "neutral", "inconclusive")


@dataclass(frozen=True)
class GateConfig:
    """How two runs are compared."""

    gate_pct: float = 2.0
    keys: tuple[str, ...] = CONFIG_KEYS
    min_trials: int = 3
    confidence: float = 0.95
    resamples: int = 4000
    seed: int = 0


def bootstrap_change_pct(base_ns: np.ndarray, new_ns: np.ndarray, cfg: GateConfig) -> tuple[float, float]:
    """Percentile bootstrap interval of 100·(median(new)/median(base) − 1), both samples resampled
    with replacement (vectorized: one matrix of resamples per run, fixed seed)."""
    rng = np.random.default_rng(cfg.seed)
    b = np.median(rng.choice(base_ns, size=(cfg.resamples, len(base_ns))), axis=1)
    n = np.median(rng.choice(new_ns, size=(cfg.resamples, len(new_ns))), axis=1)
    change = 100 * (n / b - 1)
    a = (1 - cfg.confidence) / 2
    lo, hi = np.quantile(change, [a, 1 - a])
    return float(lo), float(hi)


def rel_iqr_pct(x: np.ndarray) -> float:
    """100 · IQR / median."""
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    return float(100 * (q3 - q1) / med) if med else float("nan")


def _decide(row: dict, change: float, thr: float, lo: float, hi: float, thr_text: str, words: tuple[str, str]) -> dict:
    """The module docstring's verdict on a change with enough samples: neutral within ±``thr``, regression
    (improvement) beyond it with the interval [``lo``, ``hi``] above (below) 0, else inconclusive; ``row``
    with verdict and reason (``thr_text``: the threshold as the reason prints it; ``words``: up, down)."""
    if abs(change) <= thr:
        return dict(row, verdict="neutral", reason=f"|change| ≤ {thr_text}")
    if change > 0 and lo > 0:
        return dict(row, verdict="regression", reason=f"{words[0]} by more than {thr_text}, interval above 0")
    if change < 0 and hi < 0:
        return dict(row, verdict="improvement", reason=f"{words[1]} by more than {thr_text}, interval below 0")
    return dict(row, verdict="inconclusive", reason="change beyond the threshold but the interval contains 0")


def kernel_verdict(base_ns: np.ndarray | None, new_ns: np.ndarray | None, cfg: GateConfig) -> dict:
    """The module docstring's rule for one configuration's trials (ns)."""
    row = {"base_ms": np.nan, "new_ms": np.nan, "base_trials": 0, "new_trials": 0, "change_pct": np.nan,
           "ci_low_pct": np.nan, "ci_high_pct": np.nan, "noise_pct": np.nan, "threshold_pct": np.nan}
    if base_ns is not None:
        row.update(base_ms=float(np.median(base_ns)) / 1e6, base_trials=len(base_ns))
    if new_ns is not None:
        row.update(new_ms=float(np.median(new_ns)) / 1e6, new_trials=len(new_ns))
    if base_ns is None:
        return dict(row, verdict="neutral", reason="new configuration (no baseline)")
    if new_ns is None:
        return dict(row, verdict="inconclusive", reason="missing from the new run")
    noise = max(rel_iqr_pct(base_ns), rel_iqr_pct(new_ns))
    thr = max(cfg.gate_pct, noise)
    change = 100 * (row["new_ms"] / row["base_ms"] - 1)
    row.update(change_pct=change, noise_pct=noise, threshold_pct=thr)
    if min(len(base_ns), len(new_ns)) < cfg.min_trials:
        return dict(row, verdict="inconclusive", reason=f"fewer than {cfg.min_trials} trials")
    lo, hi = bootstrap_change_pct(base_ns, new_ns, cfg)
    row.update(ci_low_pct=lo, ci_high_pct=hi)
    return _decide(row, change, thr, lo, hi, f"{thr:.2f} %", ("slower", "faster"))


def _stall_stats(run, keys: list[str]) -> pd.DataFrame:
    """Median measured stall (µs, probe clock per SM) and backpressured count of the remote-store tiles
    per configuration (as in Table 3) (tile labels; ``kernel`` is not a tile key: tiles carry the label's kernel name)."""
    tiles = run.tiles()
    tkeys = [k for k in keys if k != "kernel"]
    cols = tkeys + ["stall_meas_us", "backpressured_tiles"]
    if tiles.empty or not tkeys:
        return pd.DataFrame(columns=cols)
    t = tile_configs(tiles)
    l2 = t[t["rs_span_ns"].notna()]
    s = l2.groupby(tkeys, sort=True)["stall_ns" if "stall_ns" in l2 else "measured_stall_ns"].median().div(1e3).rename("stall_meas_us")
    bp = l2.groupby(tkeys, sort=True)["backpressured"].sum().rename("backpressured_tiles")
    return pd.concat([s, bp], axis=1).reset_index()[cols]


TILE_SAMPLE_CAP = 2000  # tiles per run and configuration the interval resamples (a fixed-seed subsample beyond)
TILE_METRICS = ("stall_median_us", "stall_p99_us", "stalled_share_pct", "exposed_store_us")


TILE_KEYS = ("dest", "shape", "variant", "schedule")


def _tile_samples(run, keys: list[str]) -> dict[tuple, dict[str, np.ndarray]]:
    """Per configuration (``keys``, of TILE_KEYS): the remote-store tiles' measured stall, stalled flag and
    exposed store time (µs), and the noise floor (µs)."""
    t = run.tiles()
    if t.empty or "stall_ns" not in t:
        return {}
    t = t[t["rs_span_ns"].notna()]
    out = {}
    for key, g in t.assign(**{k: t[k].astype(object).fillna("-") for k in keys}).groupby(keys, sort=True):  # a few configurations
        stall = g["stall_ns"].to_numpy(np.float64)
        ok = ~np.isnan(stall)
        exposed = np.maximum(g["rs_span_ns"].to_numpy(np.float64) - g["cover_ns"].to_numpy(np.float64), 0.0) / 1e3
        out[key] = {"stall": stall[ok] / 1e3, "stalled": (stall[ok] > g["noise_ns"].to_numpy()[ok]).astype(np.float64) * 100,
                    "exposed": exposed[~np.isnan(exposed)],
                    "noise_us": float(np.nanmedian(g["noise_ns"])) / 1e3}
    return out


def _drops(run, keys: list[str]) -> dict[tuple, int]:
    """Probe records dropped per configuration (``keys``; the slices' records_dropped)."""
    sl, d = run.probe_slices(), run.dumps()
    if sl.empty or "records_dropped" not in sl or d.empty:
        return {}
    per = sl.groupby("dump")["records_dropped"].sum()
    cfg = d.drop_duplicates("dump").set_index("dump")[keys].astype(object).fillna("-")
    out: dict[tuple, int] = {}
    for k, v in per.items():
        if k in cfg.index:
            key = tuple(cfg.loc[k])
            out[key] = out.get(key, 0) + int(v)
    return out


def metric_verdict(base: np.ndarray, new: np.ndarray, stat, floor_abs: float, cfg: GateConfig) -> dict:
    """The intra-kernel rule (module docstring) for one quantity ``stat`` (a function of a sample) of two
    runs' tile samples: base, new, change, its bootstrap interval, the threshold, verdict and reason."""
    row = {"base": float(stat(base)) if len(base) else np.nan, "new": float(stat(new)) if len(new) else np.nan,
           "change": np.nan, "ci_low": np.nan, "ci_high": np.nan, "threshold": np.nan}
    if not len(base):
        return dict(row, verdict="neutral", reason="new configuration (no baseline)")
    if not len(new):
        return dict(row, verdict="inconclusive", reason="missing from the new run")
    thr = max(cfg.gate_pct / 100 * abs(row["base"]), floor_abs)
    change = row["new"] - row["base"]
    row.update(change=change, threshold=thr)
    if min(len(base), len(new)) < cfg.min_trials:
        return dict(row, verdict="inconclusive", reason=f"fewer than {cfg.min_trials} tiles")
    rng = np.random.default_rng(cfg.seed)
    b, n = (x if len(x) <= TILE_SAMPLE_CAP else rng.choice(x, TILE_SAMPLE_CAP, replace=False) for x in (base, new))
    resamples = max(cfg.resamples // 8, 200)
    diff = (np.apply_along_axis(stat, 1, rng.choice(n, size=(resamples, len(n))))
            - np.apply_along_axis(stat, 1, rng.choice(b, size=(resamples, len(b)))))
    a = (1 - cfg.confidence) / 2
    lo, hi = (float(v) for v in np.quantile(diff, [a, 1 - a]))
    row.update(ci_low=lo, ci_high=hi)
    return _decide(row, change, thr, lo, hi, f"{thr:.3g}", ("up", "down"))


def compare_tiles(base, new, cfg: GateConfig = GateConfig()) -> pd.DataFrame:
    """The intra-kernel gate (module docstring): one row per configuration of either run (the gate's keys
    that tiles carry: dest, shape, variant, schedule) and quantity (``metric``: TILE_METRICS and
    ``probe_drops``) with base, new, change, interval, threshold, verdict and reason; empty when neither run
    has tiles or no key applies."""
    keys = [k for k in TILE_KEYS if k in cfg.keys]
    if not keys:
        return pd.DataFrame(columns=["metric", "base", "new", "change", "ci_low", "ci_high", "threshold", "verdict", "reason"])
    sb, sn = _tile_samples(base, keys), _tile_samples(new, keys)
    db, dn = _drops(base, keys), _drops(new, keys)
    empty = np.zeros(0)
    stats = {"stall_median_us": ("stall", np.median), "stall_p99_us": ("stall", lambda x: np.percentile(x, 99)),
             "stalled_share_pct": ("stalled", np.mean), "exposed_store_us": ("exposed", np.median)}
    rows = []
    for key in sorted(set(sb) | set(sn)):
        b, n = sb.get(key, {}), sn.get(key, {})
        noise = max(b.get("noise_us", 0.0), n.get("noise_us", 0.0))
        for metric, (col, stat) in stats.items():
            floor = cfg.gate_pct if col == "stalled" else noise
            rows.append({**dict(zip(keys, key)), "metric": metric,
                         **metric_verdict(b.get(col, empty), n.get(col, empty), stat, floor, cfg)})
        if key in db or key in dn:
            d0, d1 = db.get(key), dn.get(key)
            verdict = ("neutral", "new configuration (no baseline)") if d0 is None else ("inconclusive", "missing from the new run") if d1 is None \
                else ("regression", "more probe records dropped") if d1 > d0 else ("improvement", "fewer probe records dropped") if d1 < d0 else ("neutral", "same drops")
            rows.append({**dict(zip(keys, key)), "metric": "probe_drops", "base": d0, "new": d1,
                         "change": None if d0 is None or d1 is None else d1 - d0, "ci_low": np.nan, "ci_high": np.nan, "threshold": 0.0,
                         "verdict": verdict[0], "reason": verdict[1]})
    return pd.DataFrame(rows, columns=[*keys, "metric", "base", "new", "change", "ci_low", "ci_high", "threshold", "verdict", "reason"])


def compare_runs(base, new, cfg: GateConfig = GateConfig()) -> pd.DataFrame:
    """One row per configuration (``cfg.keys``) of either run: kernel-time verdict columns plus
    base/new/Δ of the median measured stall and of the backpressured tiles."""
    keys = list(cfg.keys)
    unknown = [k for k in keys if k not in CONFIG_KEYS]
    if unknown:
        raise InputError(None, f"unknown configuration keys {unknown}", f"choose among {', '.join(CONFIG_KEYS)}")
    tb, tn = slowest_rank_trials(run_trials(base)), slowest_rank_trials(run_trials(new))
    if tb.empty and tn.empty and not (base.tiles().empty or new.tiles().empty):
        return pd.DataFrame()  # probe dumps without nsys reports: only the intra-kernel gate (compare_tiles) applies
    if tb.empty or tn.empty:
        raise InputError(base.path if tb.empty else new.path, "run has no kernel trials (no launch under a probe dump's configuration, after warm-ups)",
                         "analyze an nsys report (-t cuda,nvtx) together with its probe dumps, with fewer --warmup-launches than launches")
    gb = {k if isinstance(k, tuple) else (k,): 1e6 * g["kernel_ms"].to_numpy() for k, g in tb.groupby(keys, sort=True)}
    gn = {k if isinstance(k, tuple) else (k,): 1e6 * g["kernel_ms"].to_numpy() for k, g in tn.groupby(keys, sort=True)}
    if not set(gb) & set(gn):
        raise InputError(new.path, "no configuration in common with the base run", f"compare runs of the same kernels, or match on fewer keys (--by, now {','.join(keys)})")
    rows = [dict(zip(keys, k), **kernel_verdict(gb.get(k), gn.get(k), cfg)) for k in sorted(set(gb) | set(gn))]
    out = pd.DataFrame(rows)
    sb, sn = _stall_stats(base, keys), _stall_stats(new, keys)
    tkeys = [k for k in keys if k != "kernel"]
    if tkeys:
        s = sb.merge(sn, on=tkeys, how="outer", suffixes=("_base", "_new"))
        out = out.merge(s, on=tkeys, how="left")
    for c in ("stall_meas_us", "backpressured_tiles"):
        if f"{c}_base" not in out:
            out[f"{c}_base"] = out[f"{c}_new"] = np.nan
        out[f"{c}_delta"] = out[f"{c}_new"] - out[f"{c}_base"]
    return out


MARKDOWN_MARK = b"# xstage-trace compare"
MAX_GATE_PCT = 100.0


def check_gate(gate_pct: float, accept: str | None) -> None:
    """InputError unless ``--gate`` is a finite percentage in [0, MAX_GATE_PCT] and ``--accept``, when
    given, is a reason (not blank, one line): a gate of inf or nan, or a blank reason, would pass any regression."""
    if not (math.isfinite(gate_pct) and 0 <= gate_pct <= MAX_GATE_PCT):
        raise InputError(None, f"--gate {gate_pct} is not a percentage between 0 and {MAX_GATE_PCT:g}", "give the gate as a finite percentage, e.g. --gate 2")
    if accept is not None and (not accept.strip() or not accept.isprintable()):
        raise InputError(None, f"--accept {accept!r} gives no reason (blank or not one line)", "write why the regression is accepted, e.g. --accept 'larger tiles, see PR 123'")


def gate_outcome(table: pd.DataFrame, accept: str | None, tiles: pd.DataFrame | None = None) -> tuple[int, str]:
    """(exit code, one-line outcome): 1 when any configuration (kernel time, or a tile quantity of ``tiles``)
    is a regression or inconclusive, unless ``accept`` gives the reason a known regression is accepted; else 0."""
    verdicts = pd.concat([table.get("verdict", pd.Series(dtype=object)), *([tiles["verdict"]] if tiles is not None and len(tiles) else [])])
    counts = {v: int((verdicts == v).sum()) for v in VERDICTS}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    failing = counts["regression"] + counts["inconclusive"]
    if not failing:
        return 0, f"PASS: {summary}"
    if accept:
        return 0, f"ACCEPTED ({accept}): {summary}"
    return 1, f"FAIL: {summary}"


def kernel_change_line(table: pd.DataFrame) -> str:
    """The kernel-time delta in one line: the median change over the configurations both runs hold,
    and the largest slow-down and speed-up (configuration, %)."""
    both = table.dropna(subset=["change_pct"]) if "change_pct" in table else table.iloc[0:0]
    if both.empty:
        return "Kernel time: no configuration with trials in both runs."
    keys = [k for k in CONFIG_KEYS if k in both]
    name = lambda r: " ".join(str(r[k]) for k in keys)  # noqa: E731
    hi, lo = both.loc[both["change_pct"].idxmax()], both.loc[both["change_pct"].idxmin()]
    text = f"Kernel time new vs base: {both['change_pct'].median():+.1f} % median over {len(both)} configurations"
    if hi["change_pct"] >= 0.05:  # what rounds to ±0.0 % is no change worth naming
        text += f"; largest slow-down {name(hi)} {hi['change_pct']:+.1f} %"
    if lo["change_pct"] <= -0.05:
        text += f"; largest speed-up {name(lo)} {lo['change_pct']:+.1f} %"
    return text + " (nsys kernel time)."


def verdict_changes(base, new) -> list[str]:
    """Markdown bullets for the configurations (dest, shape, variant, schedule) both runs hold whose
    verdict differs: the base run's sentence and the new one's (reports/verdict_text)."""
    from xstage_trace.reports.verdict_text import verdict_table, with_sentences

    vb, vn = with_sentences(verdict_table(base)), with_sentences(verdict_table(new))
    keys = ["dest", "shape", "variant", "schedule"]
    m = vb.merge(vn, on=keys, suffixes=("_base", "_new"))
    changed = m[m["verdict_base"] != m["verdict_new"]]
    return [f"- base: {r.sentence_base}\n  new: {r.sentence_new}" for r in changed.itertuples()]


def compare_markdown(table: pd.DataFrame, outcome: str, base_path, new_path, cfg: GateConfig, accept: str | None,
                     tiles: pd.DataFrame | None = None, changes: list[str] | None = None) -> str:
    """compare.md: outcome first, then one row per configuration (report style, every number's scope named)."""
    from xstage_trace.base.paths import shown_path
    from xstage_trace.reports.markdown import md_table

    keys = [k for k in cfg.keys if k in table]
    cols = {**{k: k for k in keys}, "verdict": "verdict", "base_ms": "base (ms, nsys)", "new_ms": "new (ms, nsys)",
            "change_pct": "Δ (%)", "ci_low_pct": "CI low (%)", "ci_high_pct": "CI high (%)", "threshold_pct": "threshold (%)",
            "base_trials": "trials base", "new_trials": "trials new",
            "stall_meas_us_base": "Δt meas base (µs, probe)", "stall_meas_us_new": "Δt meas new (µs, probe)",
            "backpressured_tiles_base": "bp L2 tiles base", "backpressured_tiles_new": "bp L2 tiles new", "reason": "reason"}
    lines = ["# xstage-trace compare", "", f"**{outcome}**", "", kernel_change_line(table), "",
             f"- base: `{shown_path(base_path)}`", f"- new: `{shown_path(new_path)}`",
             f"- gate: {cfg.gate_pct:g} % on the median kernel time per configuration ({', '.join(cfg.keys)}); noise floor = the larger IQR/median of the two runs; "
             f"{100 * cfg.confidence:.0f} % bootstrap interval of the change ({cfg.resamples} resamples)"]
    if accept:
        lines.append(f"- accepted: {accept}")
    if len(table):
        order = table.assign(_o=table["verdict"].map({v: i for i, v in enumerate(VERDICTS)})).sort_values(["_o"] + keys, kind="stable")
        lines += ["", "_Timing scope: kernel time = nsys kernel rows (per trial the slowest rank, median over trials, warm-ups excluded); "
                  "Δt meas = median measured stall per remote-store tile, probe clock per SM._", "",
                  md_table(order[[c for c in cols if c in order]].rename(columns=cols)), ""]
    else:
        lines += ["", "No kernel trials in either run (no nsys report): gated on the tiles alone."]
    if tiles is not None and len(tiles):
        o = tiles.assign(_o=tiles["verdict"].map({v: i for i, v in enumerate(VERDICTS)}))
        o = o.sort_values(["_o", *[k for k in TILE_KEYS if k in o]], kind="stable")
        lines += ["", "## Tiles", "", "_Per configuration and schedule over its remote-store tiles (probe clock per SM): median and p99 measured "
                  "stall (µs), share of stalled tiles (%), median exposed store time [T_RS − T_cover]₊ (µs), probe records dropped; "
                  "threshold = max(gate % of the base, the noise floor); 95 % bootstrap interval of the change over the tiles._", "",
                  md_table(o.drop(columns=["_o"])), ""]
    if changes is not None:
        lines += ["", "## Verdicts that changed", "", *(changes or ["None: every configuration in both runs keeps its verdict."]), ""]
    return "\n".join(lines)
