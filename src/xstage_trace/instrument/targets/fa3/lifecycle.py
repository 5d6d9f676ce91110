"""FlashAttention-3 forward (recipe ``fa3``) in the tile-lifecycle vocabulary (docs/model.md §12).

Per output tile the first consumer warp records the Q tile's loop over its K/V blocks as ``mainloop``
(begin payload: the K/V-step sampling period) and the O epilogue as ``epilogue`` (O to shared memory,
the TMA store issued and waited: the tile's O burst, end payload = bytes). The O store's wait is inside
the epilogue span, so there is no separate wait event: a backpressured store shows as a longer epilogue
and, where pending stores hold up the next tile's K/V loads, as a longer next Q-loop. The epilogue's end
payload carries no byte count: a tile's O bytes are block_m · head_dim · out_bytes of the dump label.
"""

from xstage_trace.base.lifecycle import TileLifecycle

LIFECYCLE = TileLifecycle("fa3", ("fa3",), store_event="epilogue", tile_kind="attention", wait_in_store_span=True,
                          bytes_from_label=("block_m", "head_dim", "out_bytes"), load_steps="kv_blocks", load_stages=2)
