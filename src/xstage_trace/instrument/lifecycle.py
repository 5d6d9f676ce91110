"""Every instrumented kernel's tile lifecycle (docs/model.md §12), in the order the pipeline tries them.

Our own kernels map here, beside their probes: the reference fused kernel (examples/fused_moe.cu: a
``slot_wait`` before each mainloop, ``rs``/``ls`` epilogues, ``tile_info`` packing kind, expert and
wave) and a Triton kernel instrumented with ``xstage_trace.instrument.triton`` (``mainloop`` and
``store`` spans, one kind of tile). Each recipe target keeps its mapping in its own folder
(``targets/<target>/lifecycle.py``).
"""

from __future__ import annotations

from xstage_trace.base.lifecycle import TileLifecycle
from xstage_trace.instrument.targets.deepgemm_sm90.lifecycle import LIFECYCLE as DEEPGEMM_SM90
from xstage_trace.instrument.targets.fa3.lifecycle import LIFECYCLE as FA3
from xstage_trace.instrument.targets.fa4.lifecycle import LIFECYCLE as FA4
from xstage_trace.instrument.targets.flux_triton.lifecycle import LIFECYCLE as FLUX_TRITON

REFERENCE = TileLifecycle("reference", ("fused_moe",), store_event="rs", wait_event="slot_wait", local_store_event="ls",
                          info_event="tile_info", slots=2)
TRITON = TileLifecycle("triton", ("triton",), store_event="store", tile_kind="gemm")

LIFECYCLES: tuple[TileLifecycle, ...] = (REFERENCE, DEEPGEMM_SM90, FA3, FA4, FLUX_TRITON, TRITON)
