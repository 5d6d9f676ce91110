"""FlashAttention-4 (CuTe DSL, recipe ``fa4``) in the tile-lifecycle vocabulary (docs/model.md §12).

The fa4 probes' per-tile rows become probe dumps with FA3's events (targets/fa4 record mapping): a
``mainloop`` span per Q tile and an ``epilogue`` span around its O store (end payload = bytes).
"""

from xstage_trace.base.lifecycle import TileLifecycle

LIFECYCLE = TileLifecycle("fa4", ("fa4",), store_event="epilogue", tile_kind="attention", wait_in_store_span=True,
                          bytes_from_label=("block_m", "head_dim", "out_bytes"), load_steps="kv_blocks", load_stages=2)
