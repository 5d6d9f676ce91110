"""docs/ci.md and the example workflow: valid YAML, and every xstage-trace command line in them
uses a command and options that the CLI has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

DOCS = Path(__file__).resolve().parents[1] / "docs"
WORKFLOW = DOCS / "examples" / "xstage-pr.yml"


def _command_lines(text: str) -> list[list[str]]:
    text = text.replace("\\\n", " ")
    out = []
    for m in re.finditer(r"xstage-trace ([a-z-]+(?: [a-z]+)?)([^\n;|`)]*)", text):
        words = m.group(1).split()
        if words[0] in ("in", "is", "shows"):
            continue
        opts = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", m.group(2))
        out.append([words[0]] + [w for w in words[1:] if w in ("flags", "fit", "run")] + opts)
    return out


def _help(cmd: tuple[str, ...]) -> str:
    from typer.testing import CliRunner

    from xstage_trace.cli import app

    r = CliRunner().invoke(app, [*cmd, "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    assert r.exit_code == 0, (cmd, r.output)
    return r.output


def test_workflow_is_valid_and_posts_summary_and_sticky_comment():
    wf = yaml.safe_load(WORKFLOW.read_text())
    steps = wf["jobs"]["profile"]["steps"]
    sticky = [s for s in steps if str(s.get("uses", "")).startswith("marocchino/sticky-pull-request-comment")]
    assert len(sticky) == 1 and sticky[0]["with"]["header"] == "xstage-trace"
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") for s in steps)
    assert wf["permissions"]["pull-requests"] == "write"


@pytest.mark.parametrize("doc", [WORKFLOW, DOCS / "ci.md"], ids=lambda p: p.name)
def test_documented_command_lines_exist(doc):
    lines = _command_lines(doc.read_text())
    assert {"analyze", "report", "compare", "export"} <= {c[0] for c in lines}
    for c in lines:
        sub = tuple(w for w in c if not w.startswith("--"))
        text = _help(sub)
        for opt in (w for w in c if w.startswith("--")):
            assert opt in text, f"{doc.name}: xstage-trace {' '.join(sub)} has no {opt}"
