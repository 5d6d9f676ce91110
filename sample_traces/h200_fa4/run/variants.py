"""Load FlashAttention-4's ``flash_attn.cute.interface`` several times in one process: the upstream
tree, and the tree patched by ``xstage-trace instrument apply --target fa4`` with the probes off and
on. The probe switch (``XSTAGE_TRACE``) is read when ``flash_attn.cute.xstage_probe`` is imported,
so each variant is a fresh import of its tree under that environment: the ``flash_attn`` modules of
the previous variant are taken out of ``sys.modules`` first (the loaded module objects keep working:
each holds its own globals and its own in-memory compile cache).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


@dataclass(frozen=True)
class Variant:
    """One build of the kernel: a name, the flash-attention tree (holding ``flash_attn/cute``), the probe switch."""

    name: str
    tree: Path
    trace: bool


def variants(clean: Path, patched: Path) -> list[Variant]:
    """The three builds compared: upstream, patched with the probes off, patched with the probes on."""
    return [Variant("plain", clean, False), Variant("off", patched, False), Variant("traced", patched, True)]


def load_interface(v: Variant) -> ModuleType:
    """A fresh ``flash_attn.cute.interface`` of ``v.tree`` imported with ``XSTAGE_TRACE`` = ``v.trace``."""
    for name in [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "flash_attn" / "cute").is_dir()]  # no other tree
    sys.path.insert(0, str(v.tree))
    os.environ["XSTAGE_TRACE"] = "1" if v.trace else "0"
    interface = importlib.import_module("flash_attn.cute.interface")
    probe = sys.modules.get("flash_attn.cute.xstage_probe")
    patched = (v.tree / "flash_attn/cute/xstage_probe.py").is_file()
    if patched and (probe is None or probe.ENABLED != v.trace):
        raise RuntimeError(f"{v.name}: xstage_probe not loaded with ENABLED={v.trace} from {v.tree}")
    if Path(interface.__file__).resolve().parents[2] != v.tree.resolve():
        raise RuntimeError(f"{v.name}: imported {interface.__file__}, not from {v.tree}")
    return interface
