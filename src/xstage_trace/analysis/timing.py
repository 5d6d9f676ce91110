"""Timing scopes across ranks (docs/model.md §10): per trial the slowest rank, then the median over trials."""

from __future__ import annotations

import pandas as pd


def max_across_ranks_median(trials: pd.DataFrame, by: list[str], value: str = "kernel_ms") -> pd.DataFrame:
    """docs/model.md §10: for multi-rank runs, the max across ranks per trial, then the median over trials.

    ``trials`` has one row per (rank, trial, *by) with ``value``; returns one row per ``by`` group
    with the median of the per-trial maxima, the ranks and trials counted, and the per-rank medians.
    """
    per_trial = trials.groupby(by + ["trial"])[value].max().reset_index()
    out = per_trial.groupby(by)[value].median().rename(f"{value}_max_rank_median").reset_index()
    out["trials"] = per_trial.groupby(by)["trial"].nunique().to_numpy()
    out["ranks"] = trials.groupby(by)["rank"].nunique().to_numpy()
    per_rank = trials.groupby(by + ["rank"])[value].median().unstack("rank")
    per_rank.columns = [f"{value}_median_rank{r}" for r in per_rank.columns]
    return out.merge(per_rank.reset_index(), on=by)
