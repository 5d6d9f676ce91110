"""xstage-trace dashboard (Streamlit + Plotly) over run datasets, through ``xstage_trace.open_run``.

``main.py`` is the Streamlit script; pages live in ``views/`` (one small script each), data
shaping in ``shaping.py`` (pure functions), figures in ``figures.py``.
"""

from pathlib import Path

APP_SCRIPT = Path(__file__).with_name("main.py")
