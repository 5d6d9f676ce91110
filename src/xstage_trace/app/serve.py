"""The dashboard's server process (``xstage-trace dashboard`` runs ``python -m xstage_trace.app.serve run
main.py …``): Streamlit's own command line, with the libraries every first page imports (pandas, pyarrow's
Parquet reader, the run reader and the Overview's shaping; 0.5–0.7 s on the development machine) imported
in a background thread while the server starts and waits for the browser, so that a session's first
script run does not pay for them. The thread starts once Streamlit is imported: Plotly, which Streamlit
imports, looks pandas up in ``sys.modules`` without importing it and fails on a half-imported one (a
server that started the preload before Streamlit's import crashed so). Nothing that imports Streamlit is
preloaded."""

from __future__ import annotations

import sys
import threading

PRELOAD = ("pandas", "pyarrow.parquet", "pyarrow.pandas_compat", "xstage_trace.dataset.api", "xstage_trace.base.run_files",
           "xstage_trace.reports.verdict_text", "xstage_trace.reports.content", "xstage_trace.app.shaping")


def preload() -> None:
    """Import PRELOAD (a failure is left to the page that needs the module: it imports it again and reports)."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 (a warm-up only)
            return


def main() -> None:
    """``streamlit`` with this process's arguments, PRELOAD imported beside the server's start."""
    from streamlit.web.cli import main as streamlit_main  # Streamlit and Plotly first (see above)

    threading.Thread(target=preload, name="xstage-preload", daemon=True).start()
    sys.exit(streamlit_main())


if __name__ == "__main__":
    main()
