"""Kill rate of one mutation group over its non-equivalent mutants (docs/mutation.md).

    python tools/mutation_summary.py RESULTS.txt GROUP [SCOPE_REGEX]

RESULTS.txt is ``mutmut results --all true``; mutants listed in tools/mutation-equivalent.txt (one
name per line, ``# why`` after it) are left out of the rate; SCOPE_REGEX keeps the mutant names the
rate counts (the others are reported as outside the scope).
"""

import collections
import re
import sys
from pathlib import Path

EQUIVALENT = Path(__file__).with_name("mutation-equivalent.txt")


def main() -> None:
    results, group = sys.argv[1], sys.argv[2]
    scope = sys.argv[3] if len(sys.argv) > 3 else "."
    equivalent = {line.split("#")[0].strip() for line in EQUIVALENT.read_text().splitlines() if line.split("#")[0].strip()}
    status = {}
    for line in open(results):
        if "__mutmut_" in line and ":" in line:
            name, st = line.strip().rsplit(":", 1)
            status[name.strip()] = st.strip()
    inside = {n: st for n, st in status.items() if re.search(scope, n)}
    counts = collections.Counter(inside.values())
    eq = {n for n, st in inside.items() if n in equivalent and st != "killed"}
    killed = sum(1 for st in inside.values() if st in ("killed", "timeout"))
    judged = len(inside) - len(eq)
    print(f"{group}: {dict(counts)} in scope ({len(status) - len(inside)} outside it); equivalent {len(eq)}; "
          f"killed {killed}/{judged} non-equivalent = {100 * killed / max(judged, 1):.1f} %")


if __name__ == "__main__":
    main()
