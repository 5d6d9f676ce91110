"""The run dataset on disk, written: a run is written to a temporary folder and renamed (``staged_run``),
so a reader never sees half a run; its file format and readers are ``base/run_files.py``.
``-o`` never replaces a user's file or folder: only an earlier run folder (manifest.json written by
xstage-trace), only with ``force``, and then in one atomic exchange.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from xstage_trace.base.atomic import atomic_dir
from xstage_trace.base.errors import InputError
from xstage_trace.base.hashing import hash_all, sha256_of
from xstage_trace.base.jsonable import dumps
from xstage_trace.base.run_files import CALIBRATION_COPY, MANIFEST, TOOL, is_run_dir, unlisted_files, write_table
from xstage_trace.base.schema import RESULTS, SCHEMA_VERSION, TABLES, conform, empty_table


def check_output_dir(run_dir: str | Path, force: bool = False) -> Path:
    """``run_dir`` when analyze may write there: a new path, or (with ``force``) an earlier run folder.
    InputError for the current folder or one above it, a symlink, a file, or any other folder."""
    run_dir = Path(run_dir)
    here = Path(os.path.realpath(Path.cwd()))
    target = Path(os.path.realpath(run_dir))
    if run_dir.name in ("", ".", "..") or target == here or target in here.parents:
        raise InputError(run_dir, "is the current folder or one above it, not a new run folder", "name a new folder, e.g. -o run.xstage-run")
    if not os.path.lexists(run_dir):
        above = next(p for p in target.parents if os.path.lexists(p))  # the folder mkdir would start from
        if not above.is_dir():
            raise InputError(run_dir, f"cannot be created: {above} is not a folder", "name a folder path for -o")
        if not os.access(above, os.W_OK | os.X_OK):
            raise InputError(run_dir, f"cannot be created: {above} is not writable", "name a folder path you can write for -o")
        return run_dir
    if run_dir.is_symlink():
        raise InputError(run_dir, "is a symbolic link; -o never writes through one", "name a new folder")
    if not run_dir.is_dir():
        raise InputError(run_dir, "exists and is not a folder; -o never replaces a file", "name a new folder, e.g. -o run.xstage-run")
    if not is_run_dir(run_dir):
        raise InputError(run_dir, "exists and is not an xstage-trace run folder; -o never replaces it", "name a new folder, e.g. -o run.xstage-run")
    if not force:
        raise InputError(run_dir, "already holds an xstage-trace run", "pass --force to replace it, or name another folder with -o")
    foreign = unlisted_files(run_dir)
    if foreign:
        raise InputError(run_dir, f"holds files xstage-trace did not write ({', '.join(foreign[:3])}{', …' if len(foreign) > 3 else ''}); --force would delete them",
                         "move them out of the run folder, or name another folder with -o")
    return run_dir


class RunStage:
    """The temporary folder of a run being written (``staged_run``): the pipeline writes its tables,
    results and extra files here, then ``commit`` writes every table not written yet (empty ones too,
    so the schema is always there) and manifest.json with every file's sha256."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.counts: dict[str, int] = {}
        self.committed = False

    def add_counts(self, counts: dict[str, int]) -> None:
        """Row counts of tables written part by part straight into ``folder`` (a streaming analyze)."""
        self.counts.update(counts)

    def write_table(self, name: str, table: pa.Table | None) -> None:
        """One run-dataset table (TABLES), written once."""
        table = table if table is not None else empty_table(name)
        write_table(self.folder, name, table)
        self.counts[name] = table.num_rows

    def write_result(self, name: str, frame) -> None:
        """A result DataFrame as NAME.parquet (e.g. table3)."""
        table = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(conform(name, table) if name in RESULTS else table, self.folder / f"{name}.parquet", compression="zstd")

    def write_text(self, name: str, text: str) -> None:
        """An extra text file (e.g. calibration_points.csv)."""
        (self.folder / name).write_text(text)

    def copy_calibration(self, path: str | Path) -> None:
        """Keep the bytes of the calibration JSON the run is analysed with (calibration.json, hashed
        in the manifest; ``Run.calibration_document`` reads it back with the user file's checks)."""
        (self.folder / CALIBRATION_COPY).write_bytes(Path(path).read_bytes())

    def commit(self, manifest: dict) -> dict[str, int]:
        """Write the tables not written yet (empty) and manifest.json; returns the row count per table.
        The folder becomes the run when the ``staged_run`` block is left."""
        for name in TABLES:
            if name not in self.counts:
                self.write_table(name, None)
        counts = {n: self.counts[n] for n in TABLES}
        written = [q for q in sorted(self.folder.rglob("*")) if q.is_file()]
        files = dict(zip((q.relative_to(self.folder).as_posix() for q in written), hash_all(sha256_of, written)))
        doc = dict(manifest, tool=TOOL, schema_version=SCHEMA_VERSION, tables=counts, files=files)
        (self.folder / MANIFEST).write_text(dumps(doc, indent=2, sort_keys=True))
        self.committed = True
        return counts


@contextlib.contextmanager
def staged_run(run_dir: str | Path, force: bool = False) -> Iterator[RunStage]:
    """``with staged_run(dir, force) as stage: ... stage.commit(manifest)``: a run written in a temporary
    folder beside ``run_dir`` and renamed to it in one step when the block ends after ``commit``; any
    error (a full disk included: one InputError line) leaves nothing behind. An existing ``run_dir`` is
    replaced only when it is an earlier run and ``force`` is set (check_output_dir)."""
    from xstage_trace.base.output import translated_os_errors

    run_dir = check_output_dir(run_dir, force)
    with translated_os_errors(run_dir), atomic_dir(run_dir, replaceable=is_run_dir if force else None) as tmp:
        stage = RunStage(tmp)
        yield stage
        if not stage.committed:
            raise RuntimeError("staged_run block left without stage.commit()")


def write_run(run_dir: str | Path, tables: dict[str, pa.Table], manifest: dict, force: bool = False) -> dict[str, int]:
    """Write a run of in-memory ``tables`` (the others empty) and ``manifest`` in one transaction."""
    with staged_run(run_dir, force) as stage:
        for name, table in tables.items():
            if name in TABLES:
                stage.write_table(name, table)
        counts = stage.commit(manifest)
    return counts


def check_output_against_inputs(run_dir: str | Path, inputs: list[str | Path]) -> None:
    """InputError when the run folder would be an input, lie inside an input folder, or hold an input."""
    target = Path(os.path.realpath(run_dir))
    for raw in inputs:
        src = Path(os.path.realpath(raw))
        if target == src:
            raise InputError(run_dir, "is also an input; the run would replace what it is read from", "name a new folder with -o")
        if Path(raw).is_dir() and src in target.parents:
            raise InputError(run_dir, f"lies inside the input folder {src}", "write the run outside the input folders (-o elsewhere)")
        if target in src.parents:
            raise InputError(run_dir, f"holds the input {src}; replacing it would delete that input", "name a new folder with -o")
