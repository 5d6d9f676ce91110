"""The pure parts of the ``xstage_tiles`` Nsight Systems recipe (reports/nsys_recipe/xstage_tiles):
per report, analyze it with its probe dumps into a run folder and return the docs/model.md §5 verdicts;
over all reports, write the combined tables and a summary. The recipe class only wires these into
the nsys_recipe framework, which ships inside Nsight Systems (not on PyPI)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from xstage_trace.base.atomic import atomic_file, write_text_atomic
from xstage_trace.base.errors import InputError

RECIPE_NAME = "xstage_tiles"


def recipe_root() -> Path:
    """The folder to put on NSYS_RECIPE_PATH (it holds ``xstage_tiles/``)."""
    return Path(__file__).resolve().parent / "nsys_recipe"


def probe_dumps_for(report: Path, dumps: str | Path | None) -> Path:
    """The probe-dump folder of one report: ``dumps`` if given, else the report's own folder."""
    folder = Path(dumps) if dumps else Path(report).parent
    if not any(folder.glob("*.xsp*")):
        raise InputError(folder, "no probe dumps (*.xsp) for this report", "pass --dumps DIR with the dumps the instrumented kernel wrote")
    return folder


def map_report(report: str | Path, work_dir: str | Path, dumps=None, calibration=None, nvtx: str | None = None,
               warmup_launches: int = 0, nvtx_domain: str | None = None) -> pd.DataFrame:
    """Mapper: analyze one report + its dumps into ``work_dir/<report>.xstage-run``, write its
    report.md/html beside, and return its verdicts (one row per configuration × schedule) with
    ``report`` and ``run_dir`` columns. ``warmup_launches`` is ``analyze --warmup-launches``: the
    first launches of each configuration, left out of its kernel-time trials; ``nvtx`` and
    ``nvtx_domain`` are ``analyze --nvtx`` / ``--nvtx-domain``."""
    from xstage_trace import open_run
    from xstage_trace.reports.verdict_text import verdict_table
    from xstage_trace.reports.run_report import write_run_report
    from xstage_trace.pipeline.runner import analyze_inputs

    report = Path(report)
    run_dir = Path(work_dir) / f"{report.name.split('.')[0]}.xstage-run"
    analyze_inputs([report, probe_dumps_for(report, dumps)], run_dir, calibration=calibration, nvtx=nvtx,
                   nvtx_domain=nvtx_domain, warmup_launches=warmup_launches)
    run = open_run(run_dir)
    write_run_report(run, run_dir.with_name(run_dir.name + ".report"))
    v = verdict_table(run)
    return v[[c for c in v.columns if not c.endswith("_ns")]].assign(report=str(report), run_dir=str(run_dir))


def reduce_results(frames: list[pd.DataFrame], verdicts_path: str | Path, summary_path: str | Path) -> list[Path]:
    """Reducer: the verdicts of all reports as Parquet (``verdicts_path``) and a Markdown summary
    (``summary_path``)."""
    from xstage_trace.reports.markdown import md_table

    allv = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else pd.DataFrame()
    pq = Path(verdicts_path)
    with atomic_file(pq, "wb") as fh:
        allv.astype({"model_agrees": "boolean"} if "model_agrees" in allv else {}).to_parquet(fh, index=False)
    lines = ["# xstage_tiles", "", "_Timing scope: stalls = probe clock per SM (µs); kernel = nsys kernel rows (ms)._", ""]
    if len(allv):
        bound = allv[allv["verdict"] == "stall-bound"]
        lines += [f"{len(bound)} of {len(allv)} configuration × schedule pairs stall-bound over {allv['report'].nunique()} report(s).", "",
                  md_table(allv.drop(columns=["run_dir"])), ""]
    else:
        lines.append("No fused-kernel tiles found in the inputs.")
    md = Path(summary_path)
    write_text_atomic(md, "\n".join(lines) + "\n")
    return [pq, md]
