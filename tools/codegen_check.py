"""Does the probe build change the kernel? Compile a CUDA source with and without ``-DXSTAGE_TRACE``,
disassemble both cubins and compare what lies outside the probes.

An instruction belongs to a probe when ptxas's line table (``-lineinfo``, which does not change the
generated code) attributes it to ``<xstage/probe.cuh>``, or to a line of the kernel source that holds an
``XSTAGE_`` macro (the ``if (warp == 0) XSTAGE_...`` guard of a probe site). Everything else is the
kernel's own code: the check compares its register count and its instruction sequence, with register
numbers, branch labels and operand-reuse flags taken out (a different register assignment alone is not
a different kernel; a different instruction, order or loop structure is), per region of the source and
for the whole function; and each Tensor Core (HMMA) loop of both builds instruction for instruction
with its scheduling bits (stall cycles, yield, scoreboards) from the encoding, which the text omits.

    python -m tools.codegen_check src/xstage_trace/instrument/examples/fused_moe.cu \\
        --function fused_moe_kernel --region mainloop='void mainloop(' ...

The tools: ``nvcc`` from PATH (or ``$CUDA_HOME/bin``) and ``nvdisasm`` from the same CUDA or from the
Triton wheel, which ships one.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from xstage_trace.instrument import include_dir

SM90A = "-gencode=arch=compute_90a,code=sm_90a"
_FRAME = re.compile(r'"([^"]+)", line (\d+)')
_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;(?:\s*/\* 0x[0-9a-f]{16} \*/)?\s*$")
_HI_WORD = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
_SECTION = re.compile(r"^//-+ \.text\.(\S+) -+")
_REGS = re.compile(r"Compiling entry function '(\S+)'.*?Used (\d+) registers", re.S)


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    nvdisasm: str


def find_toolchain() -> Toolchain | None:
    """nvcc and nvdisasm, or None where either is missing (a machine without CUDA)."""
    nvcc = shutil.which("nvcc")
    cuda_bins = [Path(os.environ["CUDA_HOME"]) / "bin"] if os.environ.get("CUDA_HOME") else []
    cuda_bins += [Path("/usr/local/cuda/bin")]
    if nvcc is None:
        nvcc = next((str(b / "nvcc") for b in cuda_bins if (b / "nvcc").is_file()), None)
    if nvcc is None:
        return None
    candidates = [shutil.which("nvdisasm"), *(str(b / "nvdisasm") for b in [Path(nvcc).resolve().parent, *cuda_bins])]
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
        if spec is not None and spec.origin:
            candidates.append(str(Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "nvdisasm"))
    except (ImportError, ValueError):
        pass
    nvdisasm = next((c for c in candidates if c and Path(c).is_file()), None)
    return Toolchain(nvcc, nvdisasm) if nvdisasm else None


@dataclass(frozen=True)
class Control:
    """The scheduling bits ptxas puts in the top of an sm_70+ instruction word: stall cycles, yield,
    the scoreboards it sets (write, read) and those it waits on. Same text, different control = a
    different schedule."""

    stall: int
    yield_flag: int
    write_barrier: int
    read_barrier: int
    wait_mask: int

    @classmethod
    def from_high_word(cls, hi: int) -> "Control":
        return cls((hi >> 41) & 0xF, (hi >> 45) & 1, (hi >> 46) & 7, (hi >> 49) & 7, (hi >> 52) & 0x3F)


@dataclass(frozen=True)
class Instr:
    """One SASS instruction with its inlining chain (innermost frame first) as (file name, line)."""

    offset: int
    text: str
    frames: tuple[tuple[str, int], ...]
    target: int | None = None  # offset a branch jumps to
    control: Control | None = None  # from the encoding (nvdisasm -hex)

    @property
    def opcode(self) -> str:
        return re.sub(r"^@!?U?P\w+\s+", "", self.text).split()[0]

    @property
    def scheduled(self) -> tuple[str, "Control | None"]:
        """The normalized instruction with its control bits: equal when the schedule is the same."""
        return self.normalized, self.control

    @property
    def normalized(self) -> str:
        """The instruction without register numbers, labels or reuse flags."""
        t = re.sub(r"\.reuse\b", "", self.text)
        t = re.sub(r"`\(\.L_x_\d+\)", "L", t)
        return re.sub(r"\b(U?R|U?P|B)\d+\b", r"\1", t)


@dataclass
class Build:
    """One build of a kernel: its register count and its disassembly."""

    registers: int
    instrs: list[Instr]

    def hot_loops(self, opcode: str = "HMMA") -> list[list[Instr]]:
        """Innermost loops (a backward branch and the instructions it jumps back over) holding ``opcode``."""
        loops = []
        for k, ins in enumerate(self.instrs):
            if ins.target is None or ins.target > ins.offset:
                continue
            body = [i for i in self.instrs[: k + 1] if i.offset >= ins.target]
            inner = not any(i.target is not None and ins.target <= i.target <= i.offset for i in body[:-1])
            if inner and any(i.opcode.startswith(opcode) for i in body):
                loops.append(body)
        return loops


def compile_and_disassemble(tools: Toolchain, src: Path, function: str, defines: list[str], workdir: Path,
                            extra_flags: tuple[str, ...] = ("-O3", "-std=c++17")) -> Build:
    """Build ``src`` to an sm_90a cubin (``-lineinfo``), return the named kernel's registers and SASS."""
    tag = "_".join(d.lstrip("-D").split("=")[0] for d in defines) or "plain"
    cubin = workdir / f"{Path(src).stem}_{tag}.cubin"
    cmd = [tools.nvcc, *extra_flags, SM90A, f"-I{include_dir()}", "-cubin", "-lineinfo", "-Xptxas", "-v",
           *defines, str(src), "-o", str(cubin)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"nvcc failed: {' '.join(cmd)}\n{r.stderr}")
    regs = {name: int(n) for name, n in _REGS.findall(r.stderr)}
    mangled = [n for n in regs if function in n]
    if len(mangled) != 1:
        raise RuntimeError(f"{src}: no single kernel matching {function!r} among {sorted(regs)}")
    d = subprocess.run([tools.nvdisasm, "-c", "-g", "-gi", "-hex", str(cubin)], capture_output=True, text=True, timeout=300)
    if d.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on {cubin}: {d.stderr}")
    return Build(regs[mangled[0]], parse_nvdisasm(d.stdout, mangled[0]))


def parse_nvdisasm(text: str, mangled: str) -> list[Instr]:
    """The instructions of one function in ``nvdisasm -c -g -gi [-hex]`` output, each with its line frames
    (and, with ``-hex``, its control bits from the encoding's high word, printed on the next line)."""
    out: list[Instr] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    frames: list[tuple[str, int]] = []
    fresh = False  # the previous line was a line-table comment: the next one extends the chain
    inside = False
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m or line.startswith("//----"):
            inside = bool(m) and m.group(1) == mangled
            continue
        if not inside:
            continue
        label = re.match(r"^(\.L_x_\d+):", line)
        if label:
            pending.append(label.group(1))
            continue
        if line.lstrip().startswith("//## File"):
            chain = [(Path(f).name, int(n)) for f, n in _FRAME.findall(line)]
            frames = (frames if fresh else []) + chain
            fresh = True
            continue
        m = _INSTR.match(line)
        if m:
            offset = int(m.group(1), 16)
            labels.update({p: offset for p in pending})
            pending = []
            out.append(Instr(offset, m.group(2), tuple(frames)))
            fresh = False
            continue
        hi = _HI_WORD.match(line)
        if hi and out and out[-1].control is None:
            out[-1] = Instr(out[-1].offset, out[-1].text, out[-1].frames, None, Control.from_high_word(int(hi.group(1), 16)))
    def target(ins: Instr) -> int | None:
        m = re.search(r"`\((\.L_x_\d+)\)", ins.text)
        return labels.get(m.group(1)) if m else None
    return [Instr(i.offset, i.text, i.frames, target(i), i.control) for i in out]


@dataclass(frozen=True)
class Region:
    """Lines [first, last] of the kernel source (1-based), named."""

    name: str
    first: int
    last: int


def find_region(source_lines: list[str], name: str, start: str, end: str) -> Region:
    """The region from the first line matching the regex ``start`` to the next line matching ``end``."""
    i = next(k for k, s in enumerate(source_lines) if re.search(start, s))
    j = next(k for k in range(i + 1, len(source_lines)) if re.search(end, source_lines[k]))
    return Region(name, i + 1, j + 1)


@dataclass
class Classifier:
    """Which instructions are probe code and which region of the source each one belongs to."""

    source_name: str
    source_lines: list[str]
    regions: list[Region] = field(default_factory=list)

    def kernel_lines(self, ins: Instr) -> list[int]:
        """The instruction's lines in the kernel source, innermost first."""
        return [n for f, n in ins.frames if f == self.source_name]

    def is_probe(self, ins: Instr) -> bool:
        if any(f == "probe.cuh" for f, _ in ins.frames):
            return True
        return any(f == self.source_name and "XSTAGE_" in self.source_lines[n - 1] for f, n in ins.frames if 0 < n <= len(self.source_lines))

    def region(self, ins: Instr) -> str:
        """The first region (in the given order) holding any of the instruction's source lines."""
        lines = self.kernel_lines(ins)
        for r in self.regions:
            if any(r.first <= n <= r.last for n in lines):
                return r.name
        return "other"


@dataclass
class RegionDiff:
    name: str
    plain: int       # instructions in the build without probes
    traced: int      # non-probe instructions in the traced build
    identical: bool  # same normalized sequence
    changed: int     # instructions inserted, deleted or replaced (difflib)


@dataclass
class Comparison:
    registers_plain: int
    registers_traced: int
    probe_instructions: int
    regions: list[RegionDiff]
    diff: list[str]  # unified diff of the whole non-probe sequence (normalized)
    hot_loops_same: list[bool] = field(default_factory=list)  # per HMMA loop: same instructions and schedule

    @property
    def identical(self) -> bool:
        """Same registers and the same non-probe instruction sequence in every region."""
        return self.registers_plain == self.registers_traced and all(r.identical for r in self.regions)


def _changed(a: list[str], b: list[str]) -> int:
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal")


def compare(plain: Build, traced: Build, cls: Classifier) -> Comparison:
    """Compare the traced build's non-probe code with the plain build, region by region."""
    kernel_plain = [i for i in plain.instrs if not cls.is_probe(i)]
    kernel_traced = [i for i in traced.instrs if not cls.is_probe(i)]
    names = [r.name for r in cls.regions] + ["other"]
    regions = []
    for name in names:
        a = [i.normalized for i in kernel_plain if cls.region(i) == name]
        b = [i.normalized for i in kernel_traced if cls.region(i) == name]
        regions.append(RegionDiff(name, len(a), len(b), a == b, _changed(a, b)))
    a = [i.normalized for i in kernel_plain]
    b = [i.normalized for i in kernel_traced]
    diff = list(difflib.unified_diff(a, b, "plain", "traced", n=2, lineterm=""))
    loops_plain, loops_traced = plain.hot_loops(), traced.hot_loops()
    same = [[i.scheduled for i in lp] == [i.scheduled for i in lt] for lp, lt in zip(loops_plain, loops_traced)]
    same += [False] * abs(len(loops_plain) - len(loops_traced))
    return Comparison(plain.registers, traced.registers, len(traced.instrs) - len(kernel_traced), regions, diff, same)


def check_source(src: Path, function: str, regions: list[tuple[str, str, str]], tools: Toolchain,
                 defines: tuple[str, ...] = (), workdir: Path | None = None) -> Comparison:
    """Build ``src`` plain and with ``-DXSTAGE_TRACE`` (plus ``defines`` in both) and compare ``function``."""
    src = Path(src)
    lines = src.read_text().splitlines()
    cls = Classifier(src.name, lines, [find_region(lines, *r) for r in regions])
    with tempfile.TemporaryDirectory() as tmp:
        wd = Path(workdir or tmp)
        plain = compile_and_disassemble(tools, src, function, list(defines), wd)
        traced = compile_and_disassemble(tools, src, function, ["-DXSTAGE_TRACE", *defines], wd)
    return compare(plain, traced, cls)


def format_report(c: Comparison) -> str:
    """A plain-text table: registers, probe instructions, per-region counts and verdict."""
    rows = [f"registers: plain {c.registers_plain}, traced {c.registers_traced}; probe instructions: {c.probe_instructions}",
            f"{'region':<16} {'plain':>6} {'traced':>7} {'changed':>8}  same"]
    rows += [f"{r.name:<16} {r.plain:>6} {r.traced:>7} {r.changed:>8}  {'yes' if r.identical else 'NO'}" for r in c.regions]
    rows.append("HMMA loops, same instructions and schedule: " + (", ".join("yes" if x else "NO" for x in c.hot_loops_same) or "none"))
    rows.append("verdict: " + ("identical outside the probes" if c.identical else "the probes change the kernel"))
    return "\n".join(rows)


# The reference fused kernel's regions (instrument/examples/fused_moe.cu) as (name, start, end)
# regexes, most specific first: an instruction goes to the first region holding its innermost line.
FUSED_MOE_REGIONS = [
    ("mainloop", r"void mainloop\(", r"^}"),                      # the K loop (template, inlined twice)
    ("setup", r"fused_moe_kernel\(", r"__syncthreads\(\);"),     # role split, slot flags, operand block
    ("mma_role", r"if \(is_mma\) \{", r"^  \} else \{"),          # scheduler loop, slot wait, slot stores
    ("epilogue_tma", r"if \(tma_epilogue\) \{", r"continue;"),     # bulk-copy epilogue
    ("epilogue", r"^  \} else \{", r"^}"),                          # slot wait, st.global epilogue, exit
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.codegen_check", description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path)
    p.add_argument("--function", required=True, help="kernel name (a substring of the mangled name)")
    p.add_argument("--region", action="append", default=[], metavar="NAME=START..END",
                   help="a region from the first line matching the regex START to the next line matching END "
                        "(default for fused_moe.cu: its mainloop, setup, MMA role, bulk-copy and st.global epilogue)")
    p.add_argument("-D", dest="defines", action="append", default=[], help="a define for both builds (e.g. -D FOO=1)")
    p.add_argument("--diff", action="store_true", help="print the unified diff of the non-probe code")
    a = p.parse_args(argv)
    tools = find_toolchain()
    if tools is None:
        print("codegen_check: nvcc or nvdisasm not found (install the CUDA toolkit, or the triton wheel for nvdisasm)", file=sys.stderr)
        return 2
    regions = [] if a.region or a.source.name != "fused_moe.cu" else list(FUSED_MOE_REGIONS)
    for spec in a.region:
        name, _, rest = spec.partition("=")
        start, _, end = rest.partition("..")
        regions.append((name, start, end))
    c = check_source(a.source, a.function, regions, tools, tuple("-D" + d for d in a.defines))
    print(format_report(c))
    if a.diff:
        print("\n".join(c.diff))
    return 0 if c.identical else 1


if __name__ == "__main__":
    sys.exit(main())
