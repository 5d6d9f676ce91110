"""The one error type that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

from pathlib import Path


def printable(text: str) -> str:
    """``text`` with control characters (newline, tab, escape, …) written as Python escapes, so that
    a message built from it stays on one line and cannot move the terminal's cursor."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quoted_path(path: str | Path) -> str:
    """A path for a one-line message: as is when printable, else ``repr``-quoted (``'a\\nb.xsp'``)."""
    text = str(path)
    return text if text.isprintable() else repr(text)


class InputError(Exception):
    """Bad input: names the file, what is wrong with it, and how to fix it."""

    def __init__(self, path: str | Path | None, problem: str, fix: str):
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``PATH: problem; fix`` on one line (a path with control characters is quoted)."""
        where = f"{quoted_path(self.path)}: " if self.path else ""
        return f"{where}{printable(self.problem)}; {printable(self.fix)}"

    def __reduce__(self):
        # rebuilt from its three parts when it crosses a process boundary (Dask workers, multiprocessing)
        return (InputError, (self.path, self.problem, self.fix))
