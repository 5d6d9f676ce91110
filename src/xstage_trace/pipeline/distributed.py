"""Per-dump work in this process, on a local pool of worker processes, or on a Dask cluster
(issue 15; docs/scale.md). The scheduler is Dask distributed's: nothing here schedules.

``scheduler`` is
- ``None``: in this process, one dump after the other;
- ``"local:N"``: a ``dask.distributed.LocalCluster`` of N worker processes (one thread each) started
  for the call and closed after it;
- an address (``tcp://host:8786``, ``tls://…``, anything ``distributed.Client`` accepts): a running
  Dask scheduler whose workers see the dumps under the same absolute paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, TypeVar

from xstage_trace.base.errors import InputError

T = TypeVar("T")
LOCAL = "local:"
CONNECT_TIMEOUT_S = 30


def local_workers(scheduler: str) -> int | None:
    """N of ``local:N``; None for an address. InputError for ``local:`` with no positive integer."""
    if not scheduler.startswith(LOCAL):
        return None
    try:
        n = int(scheduler[len(LOCAL):])
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(None, f"--scheduler {scheduler!r} names no worker count", "write local:N with N ≥ 1, or a scheduler address tcp://host:port")
    return n


def map_dumps(func: Callable[[Path], T], paths: Iterable[str | Path], scheduler: str | None = None) -> list[T]:
    """``func(path)`` for every dump, results in the order of ``paths``.

    On a cluster ``func`` must be importable by the workers (a module-level function of an
    installed package) and should return a reduced result (per-tile / per-burst tables, counts),
    since every result travels back to this process. Paths are made absolute here, so workers on
    other machines need the same file system view (a shared mount). An exception in ``func`` on a
    worker is raised here (an ``InputError`` stays one).
    """
    return map_tasks(func, [Path(p).absolute() for p in paths], scheduler)


def map_tasks(func: Callable[..., T], items: list, scheduler: str | None = None) -> list[T]:
    """``func(item)`` for every picklable item (a tuple is spread into arguments), in order, on the
    scheduler ``map_dumps`` describes (None: in this process)."""
    if scheduler is None:
        return [func(*i) if isinstance(i, tuple) else func(i) for i in items]
    from distributed import Client, LocalCluster

    n = local_workers(scheduler)
    if n is not None:
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster) as client:
            return _gather(client, func, items)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(None, f"cannot reach the Dask scheduler at {scheduler} ({exc.__class__.__name__})",
                         "start one (dask scheduler; dask worker ADDRESS) or pass --scheduler local:N") from None
    with client:
        return _gather(client, func, items)


def _gather(client, func, items: list) -> list:
    # pure=False: two equal items are still two tasks, and no result is cached across calls
    if items and isinstance(items[0], tuple):
        return client.gather(client.map(func, *zip(*items), pure=False))
    return client.gather(client.map(func, items, pure=False))
