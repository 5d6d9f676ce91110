"""CLI start-up: importing the command line loads none of the heavy libraries (timings: benchmarks/bench_startup.py);
the CLI process loads numpy with one BLAS thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def test_cli_start_up_imports_nothing_heavy():
    code = ("import sys, xstage_trace.cli; "
            "print(sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'scipy', 'duckdb', 'dask', 'distributed', 'rich.console', 'rich.progress') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_model_stall_and_partition_run_without_pandas():
    """The one-tile stall law and the §9 partition table are numpy only: running both commands
    in-process leaves pandas (and pyarrow, which pandas 3 imports) unloaded, and the answers hold
    (Δt = [9.93 − 5.30]₊ = 4.63 µs, the paper's DiT-MoE row)."""
    code = ("import sys, json, io, contextlib\n"
            "from xstage_trace.cli import main\n"
            "out = io.StringIO()\n"
            "for argv in (['model', 'stall', '--span-us', '9.93', '--cover-us', '5.30', '--json'],\n"
            "             ['model', 'partition', '--tokens-per-expert', '256,256,256,256', '--tokens', '1024', '--hidden', '2048',\n"
            "              '--reduction', '352', '--splits', '2', '--ranks', '4', '--num-sms', '8', '--rho', '1.0', '--json']):\n"
            "    sys.argv = ['xstage-trace', *argv]\n"
            "    with contextlib.redirect_stdout(out):\n"
            "        try:\n"
            "            main()\n"
            "        except SystemExit as e:\n"
            "            assert not e.code, e.code\n"
            "    out.write('\\n')\n"
            "print(json.dumps([m for m in ('pandas', 'pyarrow') if m in sys.modules]))\n"
            "print(out.getvalue())\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, stall, partition = (line for line in r.stdout.splitlines() if line.strip())
    assert loaded == "[]"
    assert abs(json.loads(stall)["predicted_stall_us"] - 4.63) < 1e-9
    assert json.loads(partition)["comm_ctas_best"] == 1


BLAS_THREADS = """
import os, sys
if sys.argv[1] == "cli":
    from xstage_trace.cli import process_defaults
    process_defaults()
import numpy
print(len(os.listdir("/proc/self/task")))
"""


def _threads_after_numpy(mode: str, env: dict) -> int:
    return int(subprocess.run([sys.executable, "-c", BLAS_THREADS, mode], check=True, capture_output=True, text=True, env=env).stdout)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_cli_loads_numpy_with_one_blas_thread_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    default = _threads_after_numpy("plain", env)
    if default == 1:
        pytest.skip("numpy starts no BLAS threads on this machine (one CPU)")
    assert _threads_after_numpy("cli", env) == 1
    assert _threads_after_numpy("cli", dict(env, OPENBLAS_NUM_THREADS="2")) == 2  # the user's setting stands


ARROW_POOL = """
import sys
if sys.argv[1] == "cli":
    from xstage_trace.cli import process_defaults
    process_defaults()
import pyarrow
print(pyarrow.default_memory_pool().backend_name)
"""


def test_cli_allocates_arrow_buffers_from_the_system_heap_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    run = lambda mode, e: subprocess.run([sys.executable, "-c", ARROW_POOL, mode], check=True, capture_output=True, text=True, env=e).stdout.strip()  # noqa: E731
    default = run("plain", env)  # pyarrow's own default (mimalloc in its wheels)
    if default == "system":
        pytest.skip("this pyarrow allocates from the system heap by default")
    assert run("cli", env) == "system"
    assert run("cli", dict(env, ARROW_DEFAULT_MEMORY_POOL=default)) == default  # the user's choice stands
