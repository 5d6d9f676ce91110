"""The xstage-trace dashboard (``xstage-trace dashboard RUN [RUN2 …]`` runs
``streamlit run`` on this file with the run folders after ``--``)."""

from __future__ import annotations

import sys

import streamlit as st

from xstage_trace.app import state

st.set_page_config(page_title="xstage-trace", layout="wide")
state.init_runs(sys.argv[1:])

PAGES = [
    st.Page("views/overview.py", title="Overview", url_path="home", default=True),
    st.Page("views/timeline.py", title="Timeline", url_path="timeline"),
    st.Page("views/tiles.py", title="Tiles", url_path="tiles"),
    st.Page("views/bursts.py", title="Bursts", url_path="bursts"),
    st.Page("views/calibration.py", title="Calibration", url_path="calibration"),
    st.Page("views/whatif.py", title="What-if", url_path="what-if"),
    st.Page("views/partition.py", title="Partition", url_path="partition"),
    st.Page("views/compare.py", title="Compare", url_path="compare"),
    # the default page is served at / (Streamlit ignores its url_path, "home"); /overview, the link people share, opens it too
    st.Page("views/overview.py", title="Overview", url_path="overview", visibility="hidden"),
]
page = st.navigation(PAGES)
state.sidebar()
page.run()
