"""DeepGEMM sm_90 GEMMs (recipe ``deepgemm-sm90``) in the tile-lifecycle vocabulary (docs/model.md §12).

The math role records each tile's ``mainloop``; ``epilogue`` spans the STSM into the CTA's one
shared-memory D buffer and the TMA store issued (end payload = the tile's bytes); ``store_wait`` is
``tma_store_wait<0>`` on the previous tile's store, recorded after the next tile's mainloop, just before
its epilogue writes D (one staging buffer: slots 1, wait after the mainloop); ``schedule`` (the TMA-load
warp's mark) carries the tile's group index (the expert of a grouped GEMM, 0 for a plain one). A tile loads
K / 128 k-blocks through a pipeline of (typically) 4 stages.
"""

from xstage_trace.base.lifecycle import TileLifecycle

LIFECYCLE = TileLifecycle("deepgemm-sm90", ("deepgemm",), store_event="epilogue", wait_event="store_wait", info_event="schedule",
                          slots=1, wait_after_mainloop=True, tile_kind="gemm", load_steps="k_blocks", load_stages=4)
