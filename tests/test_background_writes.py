"""base.background_writes: writes on threads, their failures raised to the caller, none after the caller's block."""

import threading
import time

import pytest

from xstage_trace.base.background_writes import BackgroundWrites


def _write(path, text, delay_s=0.0):
    time.sleep(delay_s)
    path.write_text(text)


def test_every_write_is_done_when_the_block_is_left(tmp_path):
    with BackgroundWrites(threads=2, ahead=3) as writes:
        for i in range(10):
            writes.submit(_write, tmp_path / f"part-{i}", str(i), 0.01)
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == sorted(str(i) for i in range(10))


def test_a_failed_write_is_raised_to_the_caller_with_its_own_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        with BackgroundWrites() as writes:
            writes.submit(_write, tmp_path / "no-such-folder" / "part", "x")
    with pytest.raises(FileNotFoundError):  # also from wait() inside the block
        with BackgroundWrites() as writes:
            writes.submit(_write, tmp_path / "no-such-folder" / "part", "x")
            writes.wait()


def test_after_an_error_in_the_block_no_write_lands_later(tmp_path):
    with pytest.raises(RuntimeError):
        with BackgroundWrites(threads=1, ahead=5) as writes:
            writes.submit(_write, tmp_path / "running", "a", 0.2)
            writes.submit(_write, tmp_path / "queued", "b")
            time.sleep(0.05)  # the first is running, the second waits behind it
            raise RuntimeError("the caller fails")
    left = sorted(p.name for p in tmp_path.iterdir())
    time.sleep(0.3)
    assert sorted(p.name for p in tmp_path.iterdir()) == left == ["running"]  # waited for, the queued one dropped


def test_at_most_ahead_writes_wait_at_once():
    held, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def slow():
        release.wait(0.05)
        with lock:
            held[0] -= 1

    with BackgroundWrites(threads=1, ahead=2) as writes:
        for _ in range(8):
            with lock:
                held[0] += 1
                peak[0] = max(peak[0], held[0])
            writes.submit(slow)
    # a submit returns only once at most `ahead` writes are pending, so at most ahead + 1 tables are held at a time
    assert peak[0] == 3 and held[0] == 0
