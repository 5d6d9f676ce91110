"""Locate a recipe's anchors in a source tree, apply its probes idempotently, revert byte-exactly.

Inserted code is fenced by markers that name the target and the anchor:

    // >>> xstage-recipe deepgemm-sm90:fp8_1d2d.store_wait_begin     (whole lines)
    XSTAGE_BEGIN(...);
    // <<< xstage-recipe deepgemm-sm90:fp8_1d2d.store_wait_begin

    /*>>>xstage deepgemm-sm90:fp8_1d2d.param*/, xstage::DeviceBuffer xstage_buf/*<<<xstage deepgemm-sm90:fp8_1d2d.param*/

Anchors are always located in the *clean* text (markers stripped, replaced text restored from the
manifest), so ``check`` works on a patched tree and ``apply`` twice changes nothing. ``apply``
writes ``.xstage-recipe/<target>.json`` (the manifest: original hash and replaced text of every
file) and ``.xstage-recipe/<target>.diff`` (the unified diff it applied) into the tree.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from xstage_trace.base.atomic import atomic_file
from xstage_trace.base.errors import InputError
from xstage_trace.instrument.recipes.model import Anchor, Recipe

STATE_DIR = ".xstage-recipe"
PROBE_SOURCE = "<xstage/probe.cuh>"


def _comment(path: str) -> str:
    return "#" if path.endswith(".py") else "//"


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "surrogateescape")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _sha(text: str) -> str:
    return hashlib.sha256(_bytes(text)).hexdigest()


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    """Start offset of the line holding ``pos`` and the offset just past its newline."""
    start = text.rfind("\n", 0, pos) + 1
    nl = text.find("\n", pos)
    return start, (len(text) if nl < 0 else nl + 1)


@dataclass(frozen=True)
class Found:
    """An anchor located: file, 1-based line, the matched statement and the edit it makes."""

    anchor: Anchor
    path: str
    line: int
    statement: str
    start: int
    end: int
    text: str

    def describe(self) -> str:
        return f"{self.anchor.name}: {self.path}:{self.line}: {self.statement}"


@dataclass(frozen=True)
class Drift:
    """An anchor not found as expected, with the closest line of the tree (upstream drift)."""

    anchor: Anchor
    problem: str
    closest: str

    def describe(self) -> str:
        return (f"anchor {self.anchor.name} ({self.anchor.file}): {self.problem}; expected a statement like "
                f"{self.anchor.example!r} (pattern {self.anchor.pattern!r}); closest: {self.closest}")


# ---------------------------------------------------------------- markers and the clean text


def _marker_re(target: str, comment: str) -> re.Pattern:
    c = re.escape(comment)
    t = re.escape(target)
    block = (rf"^[ \t]*{c} >>> xstage-recipe {t}:(?P<bname>[\w.\-]+)\n(?:[^\n]*\n)*?"
             rf"[ \t]*{c} <<< xstage-recipe {t}:(?P=bname)\n")
    inline = rf"/\*>>>xstage {t}:(?P<iname>[\w.\-]+)\*/.*?/\*<<<xstage {t}:(?P=iname)\*/"
    return re.compile(f"(?:{block})|(?:{inline})", re.MULTILINE | re.DOTALL)


def _block(target: str, anchor: Anchor, path: str, indent: str) -> str:
    c = _comment(path)
    lines = [f"{indent}{c} >>> xstage-recipe {target}:{anchor.name}\n"]
    lines += [(f"{indent}{ln}\n" if ln.strip() else "\n") for ln in anchor.code.splitlines()]
    lines.append(f"{indent}{c} <<< xstage-recipe {target}:{anchor.name}\n")
    return "".join(lines)


def _inline(target: str, anchor: Anchor, path: str) -> str:
    if "\n" in anchor.code:
        raise ValueError(f"anchor {anchor.name}: replace inserts one line of C/C++ code")
    return f"/*>>>xstage {target}:{anchor.name}*/{anchor.code}/*<<<xstage {target}:{anchor.name}*/"


def _fenced_lines(target: str, anchor: Anchor, path: str, indent: str, lines: str) -> str:
    """Python has no inline comment: a replace there rewrites the whole lines it touches, fenced as a block."""
    c = _comment(path)
    body = lines if lines.endswith("\n") else lines + "\n"
    return (f"{indent}{c} >>> xstage-recipe {target}:{anchor.name}\n{body}"
            f"{indent}{c} <<< xstage-recipe {target}:{anchor.name}\n")


def strip(target: str, path: str, text: str, originals: list[dict] | None) -> str:
    """``text`` without this target's inserted code; replaced text comes back from ``originals``
    (the manifest's list for this file, in file order)."""
    spans = list(_marker_re(target, _comment(path)).finditer(text))
    if not spans:
        return text
    if originals is None:
        originals = [{"anchor": m.group("bname") or m.group("iname"), "original": ""} for m in spans]
        if any(m.group("iname") for m in spans):
            raise InputError(path, f"inline code of target {target} is present but {STATE_DIR}/{target}.json is missing",
                             "restore the manifest, or check the file out again from upstream")
    if len(originals) != len(spans):
        raise InputError(path, f"{len(spans)} marked spans of {target} where the manifest records {len(originals)}",
                         "check the file out again from upstream and apply the recipe afresh")
    out, pos = [], 0
    for m, orig in zip(spans, originals):
        name = m.group("bname") or m.group("iname")
        if name != orig["anchor"]:
            raise InputError(path, f"marked span {name} where the manifest expects {orig['anchor']}",
                             "check the file out again from upstream and apply the recipe afresh")
        out.append(text[pos:m.start()])
        out.append(orig["original"])
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


# ---------------------------------------------------------------- locating anchors


def _closest_line(example: str, files: dict[str, str]) -> str:
    want = " ".join(example.split())
    k = max(1, len([ln for ln in example.splitlines() if ln.strip()]))
    best = (0.0, "", 0, "")
    for path, text in files.items():
        lines = text.splitlines()
        for i in range(len(lines)):
            window = " ".join(" ".join(lines[i:i + k]).split())
            if not window:
                continue
            sm = difflib.SequenceMatcher(None, want, window, autojunk=False)
            if sm.real_quick_ratio() <= best[0] or sm.quick_ratio() <= best[0]:
                continue
            r = sm.ratio()
            if r > best[0]:
                best = (r, path, i + 1, window)
    if not best[1]:
        return "no line to compare"
    return f"{best[1]}:{best[2]}: {best[3][:160]!r} (similarity {best[0]:.2f})"


def _closest_path(glob: str, root: Path) -> str:
    suffix = Path(glob).suffix
    paths = [p.relative_to(root).as_posix() for p in root.rglob(f"*{suffix}") if STATE_DIR not in p.parts]
    best = difflib.get_close_matches(glob, paths, n=1, cutoff=0.0)
    return best[0] if best else "no file with that suffix"


def _locate_one(target: str, anchor: Anchor, path: str, text: str) -> list[Found] | Drift:
    begin = 0
    if anchor.after is not None:
        ctx = re.search(anchor.after, text, re.MULTILINE)
        if ctx is None:
            return Drift(anchor, f"{path}: context {anchor.after!r} not found", _closest_line(anchor.example, {path: text}))
        begin = ctx.end()
    stop = len(text)
    if anchor.until is not None:
        ctx = re.compile(anchor.until, re.MULTILINE).search(text, begin)
        if ctx is None:
            return Drift(anchor, f"{path}: end of context {anchor.until!r} not found", _closest_line(anchor.example, {path: text}))
        stop = ctx.start()
    rx = re.compile(anchor.pattern, re.MULTILINE)
    matches = list(rx.finditer(text, begin, stop))
    if len(matches) != anchor.count:
        where = ", ".join(f"{path}:{_line_of(text, m.start())}" for m in matches[:4])
        problem = f"{path}: {len(matches)} matches where {anchor.count} expected" + (f" ({where})" if where else "")
        closest = where if matches else _closest_line(anchor.example, {path: text})
        return Drift(anchor, problem, closest)
    found = []
    for m in matches:
        first_start, first_end = _line_bounds(text, m.start())
        last_pos = max(m.start(), m.end() - 1)
        last_start, last_end = _line_bounds(text, last_pos)
        statement = " ".join(text[first_start:last_end].split())
        if anchor.where == "before":
            ref = text[first_start:first_end]
            indent = ref[: len(ref) - len(ref.lstrip(" \t"))] + " " * anchor.indent
            found.append(Found(anchor, path, _line_of(text, m.start()), statement, first_start, first_start,
                               _block(target, anchor, path, indent)))
        elif anchor.where == "after":
            if not text[last_start:last_end].endswith("\n"):
                return Drift(anchor, f"{path}: the anchor is the last line and has no newline", statement)
            ref = text[last_start:last_end]
            indent = ref[: len(ref) - len(ref.lstrip(" \t"))] + " " * anchor.indent
            found.append(Found(anchor, path, _line_of(text, m.start()), statement, last_end, last_end,
                               _block(target, anchor, path, indent)))
        elif path.endswith(".py"):
            g = "at" if "at" in rx.groupindex else 0
            ref = text[first_start:first_end]
            indent = ref[: len(ref) - len(ref.lstrip(" \t"))]
            lines = text[first_start:m.start(g)] + anchor.code + text[m.end(g):last_end]
            found.append(Found(anchor, path, _line_of(text, m.start(g)), statement, first_start, last_end,
                               _fenced_lines(target, anchor, path, indent, lines)))
        else:
            g = "at" if "at" in rx.groupindex else 0
            found.append(Found(anchor, path, _line_of(text, m.start(g)), statement, m.start(g), m.end(g),
                               _inline(target, anchor, path)))
    return found


def _check_sentinel(recipe: Recipe, root: Path) -> None:
    if not root.is_dir():
        raise InputError(root, "is not a directory", f"pass --src the root of a {recipe.upstream[0].repo} checkout")
    for rel in recipe.sentinel:
        if not (root / rel).is_file():
            raise InputError(root, f"has no {rel}, so it is not a {recipe.upstream[0].repo} tree this recipe knows "
                             f"(closest: {_closest_path(rel, root)})",
                             f"pass --src the root of a {recipe.upstream[0].repo} checkout (verified: "
                             f"{', '.join(u.commit[:12] for u in recipe.upstream)})")


def _anchor_files(anchor: Anchor, root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.glob(anchor.file) if p.is_file())


def read_manifest(recipe: Recipe, root: Path) -> dict | None:
    """The manifest a previous ``apply`` wrote, or None."""
    p = root / STATE_DIR / f"{recipe.name}.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(p, f"unreadable manifest ({exc})", "check the tree out again from upstream") from None


def clean_texts(recipe: Recipe, root: Path, manifest: dict | None) -> dict[str, tuple[str, str]]:
    """For every file the anchors touch: (current text, clean text)."""
    originals = (manifest or {}).get("files", {})
    out = {}
    for a in recipe.anchors:
        for rel in _anchor_files(a, root):
            if rel not in out:
                cur = _read(root / rel)
                spans = originals[rel]["spans"] if rel in originals else None
                out[rel] = (cur, strip(recipe.name, rel, cur, spans))
    return out


def locate(recipe: Recipe, root: Path) -> list[Found | Drift]:
    """Every anchor of ``recipe`` located in the clean text of the tree at ``root``."""
    root = Path(root)
    _check_sentinel(recipe, root)
    texts = clean_texts(recipe, root, read_manifest(recipe, root))
    results: list[Found | Drift] = []
    for a in recipe.anchors:
        files = _anchor_files(a, root)
        if not files:
            results.append(Drift(a, f"no file matches {a.file}", _closest_path(a.file, root)))
            continue
        for rel in files:
            r = _locate_one(recipe.name, a, rel, texts[rel][1])
            results.extend([r] if isinstance(r, Drift) else r)
    return results


# ---------------------------------------------------------------- planning, applying, reverting


@dataclass(frozen=True)
class Plan:
    """What ``apply`` would do: new text per patched file and the bytes of each added file."""

    recipe: Recipe
    root: Path
    patched: dict[str, tuple[str, str, str]]     # rel -> (current, clean, new)
    spans: dict[str, list[dict]]                  # rel -> manifest span list (file order)
    added: dict[str, bytes]
    found: list[Found]

    def diff(self) -> str:
        """Unified diff from the clean upstream tree to the patched tree."""
        chunks = []
        for rel, (_, clean, new) in sorted(self.patched.items()):
            chunks += difflib.unified_diff(clean.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
        for rel, data in sorted(self.added.items()):
            new = data.decode("utf-8", "surrogateescape").splitlines(True)
            chunks += difflib.unified_diff([], new, "/dev/null", f"b/{rel}")
        return "".join(c if c.endswith("\n") else c + "\n\\ No newline at end of file\n" for c in chunks)

    def is_applied(self) -> bool:
        """True when the tree already holds exactly this plan."""
        files_ok = all(cur == new for cur, _, new in self.patched.values())
        added_ok = all((self.root / rel).is_file() and (self.root / rel).read_bytes() == data for rel, data in self.added.items())
        return files_ok and added_ok


def _added_bytes(recipe: Recipe, trace: bool) -> dict[str, bytes]:
    from xstage_trace.instrument import include_dir

    out = {}
    for f in recipe.added:
        src = include_dir() / "xstage" / "probe.cuh" if f.source == PROBE_SOURCE else recipe.files / f.source
        out[f.dest] = src.read_bytes()
    if recipe.switch is not None:
        out[recipe.switch.dest] = _bytes(recipe.switch.on_text if trace else recipe.switch.off_text)
    return out


def plan(recipe: Recipe, root: Path, trace: bool = True) -> Plan:
    """Locate every anchor and compute the patched text; raises InputError naming the first anchor
    that drifted (``check`` lists them all)."""
    root = Path(root)
    for other in recipe.conflicts:
        if (root / STATE_DIR / f"{other}.json").exists():
            raise InputError(root, f"{other} is applied to this tree and cannot be combined with {recipe.name}",
                             f"revert it first: xstage-trace instrument apply --target {other} --src {root} --revert")
    results = locate(recipe, root)
    drift = [r for r in results if isinstance(r, Drift)]
    if drift:
        more = f" (and {len(drift) - 1} more: run `xstage-trace instrument check`)" if len(drift) > 1 else ""
        raise InputError(root, drift[0].describe() + more,
                         f"use a tree at a verified commit ({', '.join(u.commit[:12] for u in recipe.upstream)}) or update the recipe")
    found = [r for r in results if isinstance(r, Found)]
    texts = clean_texts(recipe, root, read_manifest(recipe, root))
    order = {a.name: i for i, a in enumerate(recipe.anchors)}
    patched, spans = {}, {}
    for rel, (cur, clean) in texts.items():
        edits = sorted((f for f in found if f.path == rel), key=lambda f: (f.start, order[f.anchor.name]))
        for a, b in zip(edits, edits[1:]):
            if b.start < a.end:
                raise ValueError(f"recipe {recipe.name}: anchors {a.anchor.name} and {b.anchor.name} overlap in {rel}")
        parts, pos = [], 0
        for f in edits:
            parts += [clean[pos:f.start], f.text]
            pos = f.end
        parts.append(clean[pos:])
        patched[rel] = (cur, clean, "".join(parts))
        spans[rel] = [{"anchor": f.anchor.name, "original": clean[f.start:f.end]} for f in edits]
    return Plan(recipe, root, patched, spans, _added_bytes(recipe, trace), found)


def _write(path: Path, data: bytes) -> None:
    mode = path.stat().st_mode & 0o7777 if path.exists() else None
    with atomic_file(path, "wb") as fh:
        fh.write(data)
    if mode is not None:
        os.chmod(path, mode)


def _writable(path: Path, folder: bool) -> bool:
    """Writable by us and not marked read-only (no owner write bit: refused even for root, who ignores modes)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    need = os.W_OK | (os.X_OK if folder else 0)
    return os.access(path, need) and bool(st.st_mode & stat.S_IWUSR)


def check_targets(root: Path, paths: list[Path]) -> None:
    """InputError before anything is changed when a path ``apply``/``revert`` would write or delete is a
    symbolic link or lies under one inside the tree (writing would replace the link, and --revert could not
    bring it back), or it or its folder is read-only."""
    root = Path(root)
    for path in paths:
        rel = path.relative_to(root)
        for part in [root / q for q in reversed(rel.parents) if q != Path(".")] + [path]:
            if part.is_symlink():
                raise InputError(part, "is a symbolic link; instrument never writes through one (--revert could not restore the link)",
                                 "replace the link with a copy of what it points to, or apply the recipe to the tree it points into")
        if path.exists() and not _writable(path, False):
            raise InputError(path, "is read-only; nothing was changed", "make the tree writable (chmod u+w) or apply the recipe to a writable copy")
        folder = next(p for p in path.parents if p.exists())
        if not _writable(folder, True):
            raise InputError(folder, "is a read-only folder; nothing was changed", "make the tree writable (chmod u+w) or apply the recipe to a writable copy")


class _Undo:
    """The writes and deletions of one apply/revert, undone in reverse when one of them fails (a full
    disk, a file made read-only meanwhile), so the tree is what it was and the error is one line."""

    def __init__(self):
        self.saved: list[tuple[Path, bytes | None, int | None]] = []
        self.dirs: list[Path] = []

    def _remember(self, path: Path) -> None:
        d = path.parent
        missing = []
        while not d.exists():
            missing.append(d)
            d = d.parent
        self.dirs += missing
        self.saved.append((path, path.read_bytes() if path.is_file() else None, path.stat().st_mode & 0o7777 if path.exists() else None))

    def write(self, path: Path, data: bytes) -> None:
        self._remember(path)
        _write(path, data)

    def unlink(self, path: Path) -> None:
        self._remember(path)
        path.unlink()

    def rollback(self) -> None:
        for path, data, mode in reversed(self.saved):
            try:
                if data is None:
                    path.unlink(missing_ok=True)
                else:
                    _write(path, data)
                    os.chmod(path, mode)
            except OSError:
                pass
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


def _transaction(root: Path, steps) -> None:
    """Run ``steps(undo)``; on an OSError undo what was done and raise the one-line InputError."""
    from xstage_trace.base.output import os_error_line

    undo = _Undo()
    try:
        steps(undo)
    except OSError as exc:
        undo.rollback()
        raise os_error_line(exc.filename or root, exc) from None
    except BaseException:
        undo.rollback()
        raise


def apply(p: Plan) -> bool:
    """Write the plan into the tree (manifest first, so an interrupted apply can still be
    reverted). Returns False when the tree already held it (nothing written)."""
    if p.is_applied() and read_manifest(p.recipe, p.root) is not None:
        return False
    state = p.root / STATE_DIR
    old = read_manifest(p.recipe, p.root) or {}
    created_dirs = set(old.get("created_dirs", []))
    for rel in p.added:
        d = Path(rel).parent
        while d != Path(".") and not (p.root / d).exists():
            created_dirs.add(d.as_posix())
            d = d.parent
    state_files = [state / f"{p.recipe.name}.json", state / f"{p.recipe.name}.diff"]
    changed = [p.root / rel for rel, (cur, _, new) in p.patched.items() if cur != new]
    check_targets(p.root, [*state_files, *changed, *(p.root / rel for rel in p.added)])
    ours = old.get("added", {})
    for rel, data in p.added.items():
        path = p.root / rel
        if path.is_file() and rel not in ours and path.read_bytes() != data:
            raise InputError(path, "exists and was not added by this recipe; apply never replaces it", "move it out of the tree, or revert the recipe that added it")
    manifest = {
        "target": p.recipe.name,
        "files": {rel: {"original_sha256": _sha(clean), "patched_sha256": _sha(new), "spans": p.spans[rel]}
                  for rel, (_, clean, new) in p.patched.items()},
        "added": {rel: hashlib.sha256(data).hexdigest() for rel, data in p.added.items()},
        "created_dirs": sorted(created_dirs),
    }

    def steps(undo: _Undo) -> None:
        undo.write(state / f"{p.recipe.name}.json", _bytes(json.dumps(manifest, indent=1, sort_keys=True) + "\n"))
        for rel, (cur, _, new) in p.patched.items():
            if cur != new:
                undo.write(p.root / rel, _bytes(new))
        for rel, data in p.added.items():
            undo.write(p.root / rel, data)
        undo.write(state / f"{p.recipe.name}.diff", _bytes(p.diff()))

    _transaction(p.root, steps)
    return True


@dataclass(frozen=True)
class RevertReport:
    restored: list[str]
    removed: list[str]
    warnings: list[str]


def revert(recipe: Recipe, root: Path) -> RevertReport:
    """Remove the recipe's code and files; each patched file comes back byte-identical to what
    ``apply`` found (checked against the manifest's hash; a file edited elsewhere since is still
    reverted and named in the warnings)."""
    root = Path(root)
    manifest = read_manifest(recipe, root)
    if manifest is None:
        raise InputError(root / STATE_DIR / f"{recipe.name}.json", f"no manifest: {recipe.name} is not applied to this tree",
                         "nothing to revert (apply writes the manifest)")
    restored, removed, warnings = [], [], []
    cleaned = {}
    for rel, rec in manifest["files"].items():
        path = root / rel
        if not path.is_file():
            warnings.append(f"{rel}: missing, not restored")
            continue
        cur = _read(path)
        cleaned[rel] = (cur, strip(recipe.name, rel, cur, rec["spans"]))
    state_files = [root / STATE_DIR / f"{recipe.name}{suffix}" for suffix in (".diff", ".json")]
    added = [root / rel for rel in manifest.get("added", {}) if (root / rel).is_file() or (root / rel).is_symlink()]
    check_targets(root, [*(root / rel for rel, (cur, clean) in cleaned.items() if clean != cur), *added,
                         *(f for f in state_files if f.exists())])

    def steps(undo: _Undo) -> None:
        for rel, (cur, clean) in cleaned.items():
            if _sha(clean) != manifest["files"][rel]["original_sha256"]:
                warnings.append(f"{rel}: changed outside the recipe's code since apply; its other edits are kept")
            if clean != cur:
                undo.write(root / rel, _bytes(clean))
                restored.append(rel)
        for rel, digest in manifest.get("added", {}).items():
            path = root / rel
            if path.is_file():
                if hashlib.sha256(path.read_bytes()).digest().hex() != digest:
                    warnings.append(f"{rel}: edited since apply; removed anyway (the recipe added it)")
                undo.unlink(path)
                removed.append(rel)

    _transaction(root, steps)
    for d in sorted(manifest.get("created_dirs", []), key=lambda s: -s.count("/")):
        try:
            (root / d).rmdir()
        except OSError:
            warnings.append(f"{d}/: not empty, kept")
    for suffix in (".diff", ".json"):
        (root / STATE_DIR / f"{recipe.name}{suffix}").unlink(missing_ok=True)
    try:
        (root / STATE_DIR).rmdir()
    except OSError:
        pass
    return RevertReport(restored, removed, warnings)
