"""base/malloc.py: with the thresholds set, the arrays freed by one batch are reused by the next
instead of being returned to the kernel and faulted in again. Truth: the kernel's minor page-fault
counter (getrusage)."""

import ctypes
import subprocess
import sys

import pytest

# Ten "batches", each holding eight 8 MiB arrays at once (every page written), then freeing them. With
# glibc's defaults the freed heap top (64 MiB) is over its trim threshold, so it goes back to the
# kernel and every batch faults its pages in again; kept, only the first batch does.
SCRIPT = """
import resource, sys
import numpy as np
if sys.argv[1] == "set":
    from xstage_trace.base.malloc import keep_freed_memory
    assert keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for batch in range(10):
    arrays = [np.ones(1 << 20) for _ in range(8)]
    del arrays
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
BATCH_PAGES = 8 * (8 << 20) // 4096  # 4 KiB pages of one batch (fewer faults where the kernel maps huge pages)


def _faults(mode: str) -> int:
    return int(subprocess.run([sys.executable, "-c", SCRIPT, mode], check=True, capture_output=True, text=True).stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallopt"), reason="glibc's mallopt only")
def test_freed_batch_arrays_are_reused_instead_of_faulted_in_again():
    default, kept = _faults("default"), _faults("set")
    assert kept <= 1.2 * BATCH_PAGES  # about one batch's pages: the first batch's
    assert kept * 4 < default  # the defaults fault most batches in again


ARROW_SCRIPT = """
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
before = pc.add(pa.array(np.arange(1000.0)), 1)  # allocated by pyarrow's default pool (mimalloc in its wheels)
from xstage_trace.base.malloc import keep_freed_memory
assert keep_freed_memory()
after = pc.add(before, 1)
print(pa.default_memory_pool().backend_name, before.to_numpy()[-1], after.to_numpy()[-1])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallopt"), reason="glibc's mallopt only")
def test_arrow_buffers_come_from_the_heap_once_freed_memory_is_kept():
    out = subprocess.run([sys.executable, "-c", ARROW_SCRIPT], check=True, capture_output=True, text=True).stdout.split()
    assert out == ["system", "1000.0", "1001.0"]  # the heap's pool; a buffer of the pool before still reads its values


RETURN_SCRIPT = """
import resource
import numpy as np
from xstage_trace.base.malloc import freed_memory_returned, keep_freed_memory, release_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for batch in range(10):
        arrays = [np.ones(1 << 17) for _ in range(8)]  # 1 MiB each: over the block's threshold, under the kept one
        del arrays
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

assert keep_freed_memory()
release_freed_memory()  # nothing free in the heap: every array of a batch is new memory
with freed_memory_returned():
    inside = faults()
print(inside, faults())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallopt"), reason="glibc's mallopt only")
def test_freed_memory_is_returned_inside_the_block_and_kept_after_it():
    inside, after = map(int, subprocess.run([sys.executable, "-c", RETURN_SCRIPT], check=True, capture_output=True, text=True).stdout.split())
    batch_pages = 8 * (1 << 20) // 4096
    assert inside >= 5 * batch_pages  # most batches fault their pages in again: each array had pages of its own
    assert after < 2 * batch_pages  # after the block the heap grows once and serves the later batches
