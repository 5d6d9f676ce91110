"""glibc malloc settings for the processes that analyze probe batches.

Each batch allocates and frees the same few hundred MB of numpy and pandas arrays. With glibc's
defaults, arrays over its (adaptive) mmap threshold get pages of their own that are returned to the
kernel when freed, and the heap is trimmed when its free top exceeds 128 KiB, so the next batch
faults every page in again: at 20 M records, a million page faults and a fifth of the CPU time in the
kernel. Serving allocations up to MMAP_THRESHOLD_BYTES from the heap and keeping up to
TRIM_THRESHOLD_BYTES of freed memory in it cuts the faults to a quarter (benchmarks/README.md).

Arrow's buffers (decoded records, Parquet pages, conversions to pandas) come from the same heap: with pyarrow's
default allocator (mimalloc in its wheels), which purges freed pages back to the kernel after milliseconds, a
twentieth of a 10 M-record run's CPU time went to the kernel zeroing the huge pages each batch faulted in again.
``keep_freed_memory`` switches pyarrow's own calls to the heap; the C++ library's default (the Parquet writer's
buffers) is chosen by ARROW_DEFAULT_MEMORY_POOL before pyarrow is imported, which the CLI sets
(``cli.process_defaults``).
"""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from typing import Iterator

M_TRIM_THRESHOLD = -1  # mallopt parameters, <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its adaptive threshold on 64-bit
TRIM_THRESHOLD_BYTES = 256 << 20
RETURN_THRESHOLD_BYTES = 128 << 10  # glibc's own default mmap threshold
_kept = [False]  # keep_freed_memory set the thresholds in this process


def keep_freed_memory() -> bool:
    """Set the two thresholds in this process and serve Arrow's later buffers from the heap (pyarrow's system
    memory pool) — glibc only: elsewhere nothing is changed. True when set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this interpreter runs on
    except (OSError, AttributeError):  # no mallopt (macOS): leave the allocator as it is
        return False
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)):
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())  # a buffer allocated before stays with its own pool
    _kept[0] = True
    return True


@contextmanager
def freed_memory_returned() -> Iterator[None]:
    """Within the block, allocations of RETURN_THRESHOLD_BYTES and more that the heap's free memory cannot serve
    get pages of their own, returned to the kernel when freed (as by glibc's default); after it, keep_freed_memory's
    threshold again. For a task that holds many values until its end while it reads and drops parts (Table 3's
    samples of one configuration, the control samples): grown in the heap, its held arrays pin the pages between the
    parts' freed buffers and joining them takes fresh pages; at 100 M records a Table 3 task's peak RSS was twice
    what it held (benchmarks/README.md). Its caller trims the heap first (``release_freed_memory``) where the memory
    left free there is not to be reused. Nothing is changed where keep_freed_memory was not set."""
    if not _kept[0]:
        yield
        return
    mallopt = ctypes.CDLL(None).mallopt
    mallopt(M_MMAP_THRESHOLD, RETURN_THRESHOLD_BYTES)
    try:
        yield
    finally:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def release_freed_memory() -> None:
    """Give the heap's free memory back to the kernel now (glibc's ``malloc_trim``; elsewhere nothing):
    after planning, whose temporaries the passes that follow do not reuse."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
