"""The one error type that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input: names the file, what is wrong with it, and how to fix it."""

    def __init__(self, path: str | Path | None, problem: str, fix: str):
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{where}{self.problem}; {self.fix}"

    def __reduce__(self):
        # rebuilt from its three parts when it crosses a process boundary (Dask workers, multiprocessing)
        return (InputError, (self.path, self.problem, self.fix))
