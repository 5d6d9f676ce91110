"""base/hashing.sha256_of: the digest is hashlib's, a settled unchanged file is read once per process,
and a file changed (or changed too recently to trust its times) is read again."""

from __future__ import annotations

import hashlib
import os

import pytest

from xstage_trace.base import hashing


@pytest.fixture
def reads(monkeypatch):
    """Counts the file reads behind sha256_of; starts from an empty memo."""
    monkeypatch.setattr(hashing, "_DIGESTS", {})
    count = {"n": 0}
    real = hashing._read_digest

    def counted(fh, chunk_bytes):
        count["n"] += 1
        return real(fh, chunk_bytes)

    monkeypatch.setattr(hashing, "_read_digest", counted)
    return count


def test_the_digest_is_hashlib_sha256_of_the_bytes(tmp_path, reads):
    data = os.urandom(3 * 1024 + 7)
    f = tmp_path / "a.bin"
    f.write_bytes(data)
    assert hashing.sha256_of(f, chunk_bytes=1024) == hashlib.sha256(data).hexdigest()


def test_a_settled_unchanged_file_is_read_once(tmp_path, reads, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    now = hashing.time.time_ns()
    monkeypatch.setattr(hashing.time, "time_ns", lambda: now + 2 * hashing.SETTLED_NS)   # the file's times are old now
    first = hashing.sha256_of(f)
    assert hashing.sha256_of(f) == first and reads["n"] == 1


def test_a_file_changed_after_hashing_is_read_again(tmp_path, reads, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    later = {"t": hashing.time.time_ns() + 2 * hashing.SETTLED_NS}
    monkeypatch.setattr(hashing.time, "time_ns", lambda: later["t"])
    hashing.sha256_of(f)
    f.write_bytes(b"y" * 101)                 # new size and times: a new key
    assert hashing.sha256_of(f) == hashlib.sha256(b"y" * 101).hexdigest() and reads["n"] == 2


def test_a_file_written_just_now_is_hashed_every_time(tmp_path, reads):
    # its times may not advance on a rewrite within the file system's tick, so they cannot vouch for its content
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    hashing.sha256_of(f)
    hashing.sha256_of(f)
    assert reads["n"] == 2


def test_no_follow_refuses_a_symlink_even_when_its_target_is_remembered(tmp_path, reads, monkeypatch):
    f = tmp_path / "a.bin"
    f.write_bytes(b"x" * 100)
    (tmp_path / "link").symlink_to(f)
    monkeypatch.setattr(hashing.time, "time_ns", lambda: 2**62)
    hashing.sha256_of(f)
    with pytest.raises(OSError):
        hashing.sha256_of(tmp_path / "link", follow_symlinks=False)
