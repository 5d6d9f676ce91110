"""Refresh docs/screenshots/: run the dashboard browser tests (tests/test_dashboard_browser.py, the
shipped fused-kernel sample in Debian's chromium) with their screenshots written into
docs/screenshots/ instead of a temporary folder.

    python tools/refresh_screenshots.py        # needs /usr/bin/chromium and the test dependencies
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    """Run the browser tests once with ``--screenshots docs/screenshots``; their exit status."""
    if not Path("/usr/bin/chromium").exists():
        sys.stderr.write("refresh_screenshots: /usr/bin/chromium is missing (apt-get install chromium)\n")
        return 2
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_dashboard_browser.py",
           "--screenshots", str(ROOT / "docs" / "screenshots")]
    return subprocess.call(cmd, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main())
