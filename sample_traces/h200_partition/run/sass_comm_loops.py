"""Compare the communication role's gather-reduce loops of two builds of gather_rs_moe.cu (untraced, traced).
Input: `cuobjdump -sass` listings of the two cubins (nvcc -O3 -cubin -gencode=arch=compute_90a,code=sm_90a
[-DXSTAGE_TRACE]). A loop = the instructions between the two CTA barriers around each `DEPBAR.LE SB0, 0x1`
(cp.async.wait_group 1, used only there); the probes sit outside those barriers. Prints, per loop (TOPK = 4, 6, 8
in code order), whether the order of global-memory and dependency instructions (LDGSTS, LDGDEPBAR, DEPBAR, LDG,
STG, BAR) is the same in both builds, and how many instructions differ otherwise (register names, the
FFMA/LDS interleave of the shared-memory reduction). Exit 1 if a memory order differs.
Usage: python sass_comm_loops.py off.sass on.sass"""
import difflib
import re
import sys

MEM = ("LDGSTS", "LDGDEPBAR", "DEPBAR", "LDG", "STG", "BAR")


def loops(path):
    ins = []
    for line in open(path):
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m:
            ins.append(m.group(1).strip())
    bars = [i for i, t in enumerate(ins) if t.startswith("BAR.SYNC")]
    out = []
    for i, t in enumerate(ins):
        if t.startswith("DEPBAR.LE SB0, 0x1"):
            lo = max(b for b in bars if b < i)
            hi = min(b for b in bars if b > i)
            out.append(ins[lo:hi + 1])
    return out


def opcode(t):
    w = t.split()
    return w[1] if w[0].startswith("@") else w[0]


a, b = loops(sys.argv[1]), loops(sys.argv[2])
assert len(a) == len(b) == 3, (len(a), len(b))
bad = 0
for n, (x, y) in enumerate(zip(a, b)):
    mx = [opcode(t) for t in x if opcode(t).split(".")[0] in MEM]
    my = [opcode(t) for t in y if opcode(t).split(".")[0] in MEM]
    ox, oy = [opcode(t) for t in x], [opcode(t) for t in y]
    same_ops = sum(blk.size for blk in difflib.SequenceMatcher(None, ox, oy, autojunk=False).get_matching_blocks())
    print(f"loop {n}: {len(x)} / {len(y)} instructions, {len(mx)} memory/dependency instructions, "
          f"memory order {'identical' if mx == my else 'DIFFERS'}, {same_ops} opcodes in common order, "
          f"first FFMA after the last LDGSTS: {max(i for i, o in enumerate(ox) if o.startswith('LDGSTS')) < min(i for i, o in enumerate(ox) if o.startswith('FFMA'))} / "
          f"{max(i for i, o in enumerate(oy) if o.startswith('LDGSTS')) < min(i for i, o in enumerate(oy) if o.startswith('FFMA'))}")
    bad += mx != my
sys.exit(1 if bad else 0)
