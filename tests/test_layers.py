"""The layer rule: a module of src/xstage_trace imports only from its own layer or lower ones, and analysis/
reads and writes no files. Every import counts: top-level and inside functions, ``import x`` and
``from x import y``, relative ones resolved against the importing module's package."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "xstage_trace"
LAYERS = {"base": 0, "collectors": 1, "instrument": 1, "analysis": 2, "dataset": 3, "pipeline": 3, "reports": 4, "app": 4, "cli": 5}
ROOT_LAYER = 3  # xstage_trace/__init__.py: open_run and the other names of the Python API
ENTRY_LAYER = 5  # xstage_trace/__main__.py: ``python -m xstage_trace`` runs the CLI, so it sits beside cli
IO_MODULES = ("pyarrow.parquet", "pyarrow.feather", "pyarrow.csv", "pyarrow.json", "pyarrow.dataset", "duckdb", "streamlit", "plotly")
IO_CALLS = ("read_csv", "read_parquet", "read_feather", "read_json", "to_csv", "to_parquet", "to_feather",
            "read_text", "read_bytes", "write_text", "write_bytes")


def _module_of(rel: Path) -> tuple[list[str], bool]:
    """The dotted name (as parts) of the file at ``rel`` (relative to src/xstage_trace) and whether it is a package."""
    parts = ["xstage_trace", *rel.with_suffix("").parts]
    return (parts[:-1], True) if parts[-1] == "__init__" else (parts, False)


def _exists(parts: list[str]) -> bool:
    path = SRC.joinpath(*parts)
    return path.is_dir() or path.with_suffix(".py").is_file()


def imports(rel: Path, text: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import of the module text ``text`` at ``rel``, each once; ``from m import n``
    names ``m.n`` where that is a module of the package (or any third-party ``m.n``), else ``m``."""
    parts, is_package = _module_of(rel)
    package = parts if is_package else parts[:-1]
    found: dict[tuple[int, str], None] = {}
    for node in sorted((n for n in ast.walk(ast.parse(text, str(rel))) if isinstance(n, ast.Import | ast.ImportFrom)), key=lambda n: n.lineno):
        if isinstance(node, ast.Import):
            found.update(((node.lineno, alias.name), None) for alias in node.names)
            continue
        base = package[:len(package) - node.level + 1] + (node.module or "").split(".") if node.level else node.module.split(".")
        base = [p for p in base if p]
        for alias in node.names:
            sub = [*base, alias.name]
            found[node.lineno, ".".join(sub if base[0] != "xstage_trace" or _exists(sub) else base)] = None
    return list(found)


def layer_of(module: str) -> tuple[str, int] | None:
    """(layer name, rank) of a module of the package; ("third party", -1) outside it; None for one in no layer."""
    parts = module.split(".")
    if parts[0] != "xstage_trace":
        return "third party", -1
    if len(parts) == 1 or parts[1] == "__init__":
        return "package root", ROOT_LAYER
    if parts[1] == "__main__":
        return "entry point", ENTRY_LAYER
    return (parts[1], LAYERS[parts[1]]) if parts[1] in LAYERS else None


def layer_violations(rel: Path, text: str) -> list[str]:
    """One line per import of the module at ``rel`` that reaches a higher layer (or a module in no layer)."""
    own = layer_of(".".join(_module_of(rel)[0]))
    shown = f"src/xstage_trace/{rel.as_posix()}"
    if own is None:
        return [f"{shown}: in no layer (layers: {', '.join(LAYERS)}, the package root)"]
    out = []
    for line, module in imports(rel, text):
        target = layer_of(module)
        if target is None:
            out.append(f"{shown}:{line} imports {module}, which is in no layer")
        elif target[1] > own[1]:
            out.append(f"{shown}:{line} imports {module} ({target[0]}, layer {target[1]}) from {own[0]} (layer {own[1]})")
    return out


def io_violations(rel: Path, text: str) -> list[str]:
    """One line per file-reading or -writing import or call (open, pandas/pathlib read_*/to_*/write_*) of an analysis/ module."""
    shown = f"src/xstage_trace/{rel.as_posix()}"
    out = [f"{shown}:{line} imports {module}, an I/O library (analysis/ computes on tables in memory)"
           for line, module in imports(rel, text) if any(module == m or module.startswith(m + ".") for m in IO_MODULES)]
    for node in sorted((n for n in ast.walk(ast.parse(text, str(rel))) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name == "open" or (isinstance(f, ast.Attribute) and name in IO_CALLS):
            out.append(f"{shown}:{node.lineno} calls {name}(), file I/O (analysis/ computes on tables in memory)")
    return out


def _modules():
    return [(p.relative_to(PACKAGE), p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))]


def test_no_module_imports_from_a_higher_layer():
    found = [v for rel, text in _modules() for v in layer_violations(rel, text)]
    assert not found, "imports against the layer rule (base < collectors, instrument < analysis < dataset, pipeline, root < reports, app < cli):\n" + "\n".join(found)


def test_analysis_modules_do_no_file_io():
    found = [v for rel, text in _modules() if rel.parts[0] == "analysis" for v in io_violations(rel, text)]
    assert not found, "\n".join(found)


def test_the_checker_reports_fabricated_upward_imports_with_file_line_and_module():
    text = ("import xstage_trace.reports.html\n"
            "from xstage_trace.base.errors import InputError\n"
            "from xstage_trace import cli\n"
            "\n"
            "def f():\n"
            "    from ..analysis import verdict\n"
            "    from .align import align\n")
    found = layer_violations(Path("collectors/fabricated.py"), text)
    assert found == ["src/xstage_trace/collectors/fabricated.py:1 imports xstage_trace.reports.html (reports, layer 4) from collectors (layer 1)",
                     "src/xstage_trace/collectors/fabricated.py:3 imports xstage_trace.cli (cli, layer 5) from collectors (layer 1)",
                     "src/xstage_trace/collectors/fabricated.py:6 imports xstage_trace.analysis.verdict (analysis, layer 2) from collectors (layer 1)"]


def test_the_checker_resolves_a_package_s_relative_import_from_its_own_package():
    # in analysis/__init__.py, ``from .. import dataset`` is xstage_trace.dataset (layer 3), not analysis.dataset
    assert layer_violations(Path("analysis/__init__.py"), "from .. import dataset\nfrom . import spans\n") == [
        "src/xstage_trace/analysis/__init__.py:1 imports xstage_trace.dataset (dataset, layer 3) from analysis (layer 2)"]


def test_the_checker_reports_fabricated_file_io_in_analysis():
    text = ("import pyarrow.parquet as pq\n"
            "from pyarrow import feather\n"
            "import pyarrow.compute as pc\n"
            "def f(path, df):\n"
            "    with open(path) as fh:\n"
            "        return df.to_parquet(path)\n")
    assert io_violations(Path("analysis/fabricated.py"), text) == [
        "src/xstage_trace/analysis/fabricated.py:1 imports pyarrow.parquet, an I/O library (analysis/ computes on tables in memory)",
        "src/xstage_trace/analysis/fabricated.py:2 imports pyarrow.feather, an I/O library (analysis/ computes on tables in memory)",
        "src/xstage_trace/analysis/fabricated.py:5 calls open(), file I/O (analysis/ computes on tables in memory)",
        "src/xstage_trace/analysis/fabricated.py:6 calls to_parquet(), file I/O (analysis/ computes on tables in memory)"]
