"""FLUX's Triton GEMM + ReduceScatter (recipe ``flux-triton``) in the tile-lifecycle vocabulary (docs/model.md §12).

The GEMM-RS kernel marks each tile with ``tile_info`` (kind 1: a remote-store epilogue, the reference
kernel's packing), records its ``mainloop`` and the ``rs`` span around the tile's remote stores (end
payload = bytes), whose plain stores block the tile's program until the path takes them: the wait is inside
the store span, and the stores of one round share the link (``plain_stores``); the flag ``signal`` after it is not part of the tile's life. The reduce kernel's
``flag_wait``/``reduce`` spans have no compute span and make no tiles.
"""

from xstage_trace.base.lifecycle import TileLifecycle

LIFECYCLE = TileLifecycle("flux-triton", ("flux_gemm_rs",), store_event="rs", info_event="tile_info", wait_in_store_span=True,
                          plain_stores=True)
