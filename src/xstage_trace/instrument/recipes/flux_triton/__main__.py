"""``python -m xstage_trace.instrument.recipes.flux_triton apply|revert FLUX_CHECKOUT``."""

from __future__ import annotations

import sys

from xstage_trace.base.errors import InputError
from xstage_trace.instrument.recipes.flux_triton import apply, revert


def main(argv: list[str]) -> int:
    """Apply or revert the recipe; bad input prints one line and returns 2."""
    if len(argv) != 2 or argv[0] not in ("apply", "revert"):
        print("usage: python -m xstage_trace.instrument.recipes.flux_triton apply|revert FLUX_CHECKOUT", file=sys.stderr)
        return 2
    try:
        changed = (apply if argv[0] == "apply" else revert)(argv[1])
    except InputError as exc:
        print(exc.one_line(), file=sys.stderr)
        return 2
    for p in changed:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
