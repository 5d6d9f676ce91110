"""The tensor-core main loop of a compiled Triton kernel, in SASS, to check what probes do to it.

Probes outside a GEMM's K loop can still change it: ptxas allocates the whole kernel at once, and a
probe that makes it move the loop's HGMMA descriptor arithmetic from the uniform datapath into
vector registers adds instructions to every K step (docs/triton-probes.md). This module
disassembles ``kernel.asm["cubin"]`` with the ``nvdisasm`` that comes with the Triton wheel and
gives the innermost loop that issues HGMMA, so an instrumented build can be compared with the
probe-free one instruction for instruction (tests/test_triton_probes.py, and the benchmark
benchmarks/bench_triton_vs_proton.py records it beside its timings).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?(\.L_x_\d+)")
_REGISTER_FILES = [(re.compile(r"\bUR\d+\b"), "UR"), (re.compile(r"\bR\d+\b"), "R"), (re.compile(r"\bUP\d\b"), "UP"),
                   (re.compile(r"\bP\d\b"), "P"), (re.compile(r"\.L_x_\d+"), "LABEL"), (re.compile(r"\.reuse\b"), "")]


@dataclass(frozen=True)
class MmaLoop:
    """The innermost loop of a kernel that issues HGMMA: its instructions from the loop head to the
    backward branch, inclusive, as nvdisasm prints them (predicate, opcode, operands)."""

    instructions: tuple[str, ...]

    @property
    def mix(self) -> Counter:
        """Instruction mix: each instruction with its registers named only by their file (R, UR, P,
        UP) and operand-reuse flags dropped, counted; equal mixes mean the same instructions up to
        register numbering and issue order."""
        out: Counter = Counter()
        for text in self.instructions:
            for pattern, name in _REGISTER_FILES:
                text = pattern.sub(name, text)
            out[text] += 1
        return out

    @property
    def r2ur(self) -> int:
        """R2UR moves (vector → uniform register) in the loop."""
        return sum(1 for t in self.instructions if re.search(r"(^|\s)R2UR\b", t))

    @property
    def uniform(self) -> int:
        """Instructions in the loop that touch a uniform register or predicate."""
        return sum(1 for t in self.instructions if re.search(r"\bUR(\d+|Z)\b|\bUP(\d|T)\b", t))


def nvdisasm() -> Path:
    """The ``nvdisasm`` that comes with the installed Triton wheel."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no nvdisasm in this Triton wheel")
    return path


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin (``nvdisasm -c``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(nvdisasm()), "-c", str(path)], capture_output=True, text=True, check=True).stdout


def mma_loop(sass: str) -> MmaLoop:
    """The innermost loop (a backward branch to a label, the smallest such span) whose body holds
    an HGMMA; ValueError when the kernel has none."""
    instructions: list[tuple[int, str]] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in sass.splitlines():
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTRUCTION.match(line)
        if m:
            addr = int(m.group(1), 16)
            instructions.append((addr, m.group(2)))
            labels.update((name, addr) for name in pending)
            pending = []
    loops = []
    for addr, text in instructions:
        m = _BRANCH_TARGET.search(text)
        head = labels.get(m.group(1)) if m else None
        if head is not None and head <= addr:
            body = tuple(t for a, t in instructions if head <= a <= addr)
            if any(re.search(r"(^|\s)HGMMA\.", t) for t in body):
                loops.append(body)
    if not loops:
        raise ValueError("no loop issuing HGMMA in this kernel")
    return MmaLoop(min(loops, key=len))


def kernel_mma_loop(kernel) -> MmaLoop:
    """:func:`mma_loop` of a compiled Triton kernel (``triton.compile`` result or a launch's return)."""
    return mma_loop(disassemble(kernel.asm["cubin"]))
