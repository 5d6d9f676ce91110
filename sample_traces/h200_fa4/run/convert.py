"""Turn bench.py's per-case FA4 rows (``rows/*.npz``: the (batch, heads, m_blocks, 8) record tensor and
the case's metadata) into probe dumps (``instrument/targets/fa4/records.py``), one ``.xsp`` per case, labelled
with the geometry the piggyback audit reads (``seqlen causal block_m block_n head_dim out_bytes``).

    usage: python convert.py RES_DIR OUT_DIR      (RES_DIR: run.sh's res/, holding rows/ and bench.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from xstage_trace.base.errors import InputError
from xstage_trace.instrument.targets.fa4.records import write_fa4_dump


def label_of(case: dict, tiles: int) -> str:
    """The dump label: the run configuration as key=value words (docs/probe-format.md, Label)."""
    shape = f"b{case['batch']}h{case['heads']}s{case['seqlen']}{'c' if case['causal'] else 'n'}"
    return (f"kernel=fa4 dest={case['dest']} shape={shape} tiles={tiles} ctas={tiles} slice=sm batch={case['batch']} "
            f"heads={case['heads']} seqlen={case['seqlen']} causal={case['causal']} block_m={case['block_m']} "
            f"block_n={case['block_n']} head_dim={case['head_dim']} out_bytes={case['out_bytes']} trial={case['trial']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("res", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    try:
        bench = json.loads((args.res / "bench.json").read_text())
        args.out.mkdir(parents=True, exist_ok=True)
        for case in bench["cases"]:
            src = args.res / "rows" / f"{case['name']}.npz"
            with np.load(src) as z:
                rows = z["rows"]
            tiles = int((rows[..., 7] == 1).sum())
            info = write_fa4_dump(args.out / f"{case['name']}.xsp", rows, gpu_name=bench["gpu_name"],
                                  sm_count=bench["sm_count"], label=label_of(case, tiles), source=src)
            print(f"{case['name']}: {info['tiles']} tiles on {info['slices']} SMs, SM clock {info['sm_clock_khz'] / 1e3:.0f} MHz")
    except InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
