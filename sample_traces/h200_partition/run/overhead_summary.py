"""Probe overhead of gather_rs_moe.cu from the device script's overhead step (results/times_ovh_*):
per workload and C, the median kernel time of the untraced build (rounds 'off'), the traced build ('on') and the
untraced build again ('off_b', an A/A control), over every trial of every round. traced_minus_1 = on / off - 1,
aa_minus_1 = off_b / off - 1. Usage: python overhead_summary.py RESULTS_DIR > RESULTS_DIR/overhead_summary.csv"""
import sys
from pathlib import Path

import pandas as pd

res = Path(sys.argv[1])
frames = []
for f in sorted(res.glob("times_ovh_*")):
    build = f.name.split("_r")[0].removeprefix("times_ovh_")  # off | on | off_b
    frames.append(pd.read_csv(f).assign(build=build))
med = pd.concat(frames).groupby(["workload", "comm_ctas", "build"])["kernel_ms"].median().unstack("build")
out = pd.DataFrame({"off": med["off"], "on": med["on"], "traced_minus_1": med["on"] / med["off"] - 1,
                    "aa_minus_1": med["off_b"] / med["off"] - 1}).reset_index()
out.round({"off": 5, "on": 5, "traced_minus_1": 5, "aa_minus_1": 5}).to_csv(sys.stdout, index=False)
