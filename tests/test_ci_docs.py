"""docs/ci.md and the example workflow: valid YAML, and every xstage-trace command line in them
uses a command and options that the CLI has; the same for the README and docs/cli.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WORKFLOW = DOCS / "examples" / "xstage-pr.yml"


def _command_lines(text: str) -> list[list[str]]:
    text = text.replace("\\\n", " ")
    out = []
    for m in re.finditer(r"xstage-trace ([a-z-]+(?: [a-z][a-z-]*)?)([^\n;|`)]*)", text):
        words = m.group(1).split()
        if words[0] in ("in", "is", "shows", "tells", "probe", "run", "did"):  # prose, not a command
            continue
        opts = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", m.group(2))
        subs = ("flags", "fit", "run", "partition", "partition-sweep", "burst", "stall", "qloop", "interleave", "sequence")
        out.append([words[0]] + [w for w in words[1:] if w in subs] + opts)
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
    _check_options_exist(doc, lines)


def _check_options_exist(doc: Path, lines: list[list[str]]) -> None:
    for c in lines:
        sub = tuple(w for w in c if not w.startswith("--"))
        text = _help(sub)
        for opt in (w for w in c if w.startswith("--")):
            assert opt in text, f"{doc.name}: xstage-trace {' '.join(sub)} has no {opt}"


@pytest.mark.parametrize("doc", [ROOT / "README.md", DOCS / "cli.md"], ids=lambda p: p.name)
def test_readme_and_cli_reference_command_lines_exist(doc):
    lines = _command_lines(doc.read_text())
    assert {"analyze", "report", "dashboard"} <= {c[0] for c in lines}
    _check_options_exist(doc, lines)


def test_readme_is_a_front_door():
    """Issue 29: at most 150 lines, the two set-up commands first, the first instrumenting example early."""
    text = (ROOT / "README.md").read_text()
    lines = text.split("\n")
    assert len(lines) <= 150
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    first, second = lines[fences[0] + 1], lines[fences[2] + 1]
    assert first.startswith("python3 -m venv .venv") and " analyze " in first
    assert second.startswith("python3 -m venv .venv") and "pytest" in second
    assert text.index("## Instrumenting a kernel") < text.index("## Where to read more")
    for link in ("docs/model.md", "docs/results.md", "docs/cli.md"):
        assert link in text and (ROOT / link).exists()
