"""The tile-lifecycle vocabulary (docs/model.md §12): which probe events of a kernel are a tile's compute
span, its store issue, the wait for its staging buffer and its identity.

Every instrumented kernel, ours or a recipe target's, runs tiles through the same life: a compute span
(the GEMM mainloop, the attention Q-loop) that loads operands and feeds the Tensor Cores; an epilogue
that issues the tile's stores (bytes and destination: the remote-store burst); a wait for a staging
buffer (a slot the store still holds) somewhere before a later tile can write its epilogue; then the
next tile's compute span on the same CTA. The tile and wave identity come from the record's tile
field and an info mark. A target maps its own probe events onto that life with one ``TileLifecycle``,
kept beside its recipe (``xstage_trace.instrument.targets.<target>.lifecycle``); the registry
(``xstage_trace.instrument.lifecycle``) hands them to the pipeline, and the analyses read only the
vocabulary, never a target's event names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TileLifecycle:
    """One kernel family's probe events in the tile-lifecycle vocabulary (docs/model.md §12).

    ``compute_event``: the tile's compute span (begin/end). ``store_event``: the span around the tile's
    remote stores (end payload = bytes). ``local_store_event``: the epilogue of tiles that store locally
    (the fused kernel's Linear-1 tiles), None if every tile stores remotely. ``wait_event``: the wait
    for the staging buffer, None when the kernel does not record one (FlashAttention's O store waits
    inside its epilogue: ``wait_in_store_span``, the store span then holds the wait). With ``slots`` staging buffers, tile i's buffer is reused by tile i+slots
    and the wait measured there is tile i's; ``wait_after_mainloop`` says the wait comes after that
    tile's compute span (DeepGEMM's ``tma_store_wait`` before the epilogue) instead of before it.
    ``info_event``: the mark carrying the tile's group (``tile_kind`` None: the fused kernels' packing
    kind | expert << 1 | wave << 16; else the payload is the group index and every tile has this kind).
    ``kernels``: the ``kernel=`` label values (prefixes) of the dumps this lifecycle applies to.
    ``bytes_from_label``: for probes whose store end payload carries no byte count, the label words whose
    product is a tile's store bytes (FlashAttention: block_m · head_dim · out_bytes). ``load_steps``: how a
    tile's operand loads are counted for the forward prediction (docs/model.md §11): "k_blocks" (a GEMM's K / 128
    k-blocks, K from the shape label's ``k``), "kv_blocks" (an attention tile's K/V blocks, from its tile id and the
    label's geometry), None (one load step); ``load_stages``: the pipeline stages the loads run ahead.
    ``plain_stores``: the tile's remote stores are plain stores from registers (not a bulk copy of a staged tile):
    they hold the program until the path takes them, the stores of one issue round share the link and each
    completes when its round has drained (docs/model.md Eq. 48)."""

    name: str
    kernels: tuple[str, ...]
    store_event: str
    wait_event: str | None = None
    local_store_event: str | None = None
    info_event: str | None = None
    slots: int = 1
    wait_after_mainloop: bool = False
    tile_kind: str | None = None
    wait_in_store_span: bool = False
    bytes_from_label: tuple[str, ...] = ()
    load_steps: str | None = None
    load_stages: int = 1
    plain_stores: bool = False
    compute_event: str = "mainloop"

    def __post_init__(self):
        if self.slots < 1 or self.load_stages < 1:
            raise ValueError(f"lifecycle {self.name}: slots and load_stages must be >= 1")
        if self.load_steps not in (None, "k_blocks", "kv_blocks"):
            raise ValueError(f"lifecycle {self.name}: load_steps must be None, 'k_blocks' or 'kv_blocks'")
        if self.compute_event != "mainloop":
            raise ValueError(f"lifecycle {self.name}: the compute span is recorded as 'mainloop' by every probe set")

    @property
    def events(self) -> list[str]:
        """The probe events the tile table reads under this lifecycle."""
        return [e for e in (self.compute_event, self.wait_event, self.store_event, self.local_store_event, self.info_event) if e]

    def tile_bytes(self, extra: str | None) -> float | None:
        """A tile's store bytes from a dump label's extra ``key=value`` words (``bytes_from_label``), None
        when the lifecycle takes them from the payload or a word is missing or not a positive integer."""
        if not self.bytes_from_label:
            return None
        words = dict(w.split("=", 1) for w in str(extra or "").split() if "=" in w)
        try:
            values = [int(words[k]) for k in self.bytes_from_label]
        except (KeyError, ValueError):
            return None
        return float(np.prod(values)) if all(v > 0 for v in values) else None

    def applies_to(self, kernel: str | None) -> bool:
        """Whether a dump labelled ``kernel=<kernel>`` runs this lifecycle."""
        return kernel is not None and any(str(kernel).startswith(k) for k in self.kernels)


def lifecycle_of(kernel: str | None, events: set[str], lifecycles: tuple[TileLifecycle, ...]) -> TileLifecycle:
    """The lifecycle of one dump: the first whose ``kernels`` match its label; for a dump whose label
    names no known kernel, the first whose wait event it records, else the first whose store event it
    records, else the first of ``lifecycles`` (the reference kernel's)."""
    for lc in lifecycles:
        if lc.applies_to(kernel):
            return lc
    for lc in lifecycles:
        if lc.wait_event and lc.wait_event in events:
            return lc
    return next((lc for lc in lifecycles if lc.store_event in events), lifecycles[0])
