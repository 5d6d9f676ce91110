"""The decoded-export cache (collectors/export_cache.py): a second read of an export comes from the cache and
equals a read from SQLite; a changed export, a changed reader or a damaged entry is never served."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

import xstage_trace.collectors.export_cache as cache
import xstage_trace.collectors.nsys_reader as reader
from conftest import reference_sqlite
from xstage_trace.collectors.nsys_reader import read_nsys_export


def _same(a, b) -> None:
    for name in cache.TABLES:
        assert getattr(a, name).equals(getattr(b, name)), name
    for name in cache.FIELDS:
        assert getattr(a, name) == getattr(b, name), name


@pytest.fixture
def export(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "capture.sqlite"
    shutil.copyfile(reference_sqlite(), path)
    return path


def _no_sqlite(monkeypatch) -> None:
    def refuse(path):
        raise AssertionError("read from SQLite")
    monkeypatch.setattr(reader, "_read_nsys_export", refuse)


def test_a_second_read_comes_from_the_cache_and_equals_the_sqlite_read(export, monkeypatch):
    first = read_nsys_export(export)  # from SQLite (the cache is empty), then stored
    _no_sqlite(monkeypatch)
    _same(read_nsys_export(export), first)


def test_a_changed_export_is_read_again(export):
    before = read_nsys_export(export)
    with sqlite3.connect(export) as db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = (SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    assert read_nsys_export(export).kernels.num_rows == before.kernels.num_rows - 1


def test_a_changed_reader_does_not_read_the_old_entry(export, monkeypatch):
    read_nsys_export(export)
    monkeypatch.setattr(cache, "reader_fingerprint", lambda: "another reader")
    calls = []
    real = reader._read_nsys_export
    monkeypatch.setattr(reader, "_read_nsys_export", lambda p: calls.append(p) or real(p))
    read_nsys_export(export)
    assert calls == [export]


def test_a_damaged_entry_is_read_from_the_export_and_replaced(export, monkeypatch):
    first = read_nsys_export(export)
    entry = cache._entry(export)
    (entry / "gpu_metrics.arrow").write_bytes((entry / "gpu_metrics.arrow").read_bytes()[:100])
    _same(read_nsys_export(export), first)
    _no_sqlite(monkeypatch)  # and the entry was written again
    _same(read_nsys_export(export), first)


def test_an_unwritable_cache_leaves_the_read_as_it_is(export, monkeypatch, tmp_path):
    first = read_nsys_export(export)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    _same(read_nsys_export(export), first)
