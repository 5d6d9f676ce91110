"""``xstage-trace dashboard``: refuses what is not a run folder; the streamlit command it runs."""

from __future__ import annotations

import subprocess
import sys

from xstage_trace.app import APP_SCRIPT
from xstage_trace.cli.dashboard import streamlit_command


def test_dashboard_refuses_a_folder_that_is_not_a_run(tmp_path, fused_run_dir):
    r = subprocess.run([sys.executable, "-m", "xstage_trace", "dashboard", str(fused_run_dir), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(tmp_path) in lines[0] and "not an xstage run dataset" in lines[0]
    assert "Traceback" not in r.stderr


def test_streamlit_command_is_headless_on_the_port_with_the_runs_after_the_separator(fused_run_dir):
    cmd = streamlit_command([fused_run_dir], 8765, "localhost")
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4] == str(APP_SCRIPT)
    i = cmd.index("--")
    assert cmd[i + 1:] == [str(fused_run_dir.resolve())]
    opts = dict(zip(cmd[5:i:2], cmd[6:i:2]))
    assert opts["--server.headless"] == "true" and opts["--server.port"] == "8765" and opts["--server.address"] == "localhost"
