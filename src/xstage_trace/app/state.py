"""Which runs the dashboard shows: the folders given on the command line (after ``--``), kept in
the session, plus any the user opens from the sidebar."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from xstage_trace.base.errors import InputError

RUNS_KEY = "run_paths"


def init_runs(argv: list[str]) -> None:
    """Seed the session's run list from the command line once."""
    if RUNS_KEY not in st.session_state:
        st.session_state[RUNS_KEY] = [str(Path(a).resolve()) for a in argv]


def run_name(path: str) -> str:
    """A short name for a run folder."""
    return Path(path).name


def sidebar() -> None:
    """Run picker and "open another run" field."""
    paths = st.session_state[RUNS_KEY]
    with st.sidebar:
        if paths:
            st.selectbox("Run", paths, format_func=run_name, key="run")
        new = st.text_input("Open another run folder", key="open_run", placeholder="path/to/RUN.xstage-run")
        if new and st.session_state.get("_opened") != new:
            st.session_state["_opened"] = new
            from xstage_trace import open_run

            try:
                open_run(new)
            except InputError as exc:
                st.error(exc.one_line())
            else:
                p = str(Path(new).resolve())
                if p not in paths:
                    st.session_state[RUNS_KEY] = [*paths, p]
                    st.rerun()


def current_run() -> str | None:
    """The selected run folder, or None (and a message) when none was given."""
    paths = st.session_state.get(RUNS_KEY) or []
    if not paths:
        st.info("No run given. Start the dashboard with `xstage-trace dashboard RUN [RUN2 …]`, or open a run "
                "folder (written by `xstage-trace analyze -o RUN`) in the sidebar.")
        return None
    sel = st.session_state.get("run")
    return sel if sel in paths else paths[0]


def keep_valid(key: str, options: list, preferred=None) -> None:
    """Before a selectbox keyed ``key`` is drawn: when its remembered value is not among ``options``
    (another run was selected), start over from ``preferred`` (or the first option)."""
    if options and st.session_state.get(key) not in options:
        st.session_state[key] = preferred if preferred in options else options[0]
