"""``.nsys-rep`` input: export to SQLite with the user's nsys, cached beside the report (or in the
user's cache) by its hash, and trusted again only after the cache's sidecar checks out."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from xstage_trace.base.atomic import current_umask, remove_stale_temporaries
from xstage_trace.base.hashing import sha256_of
from xstage_trace.base.jsonable import dumps, loads
from xstage_trace.base.paths import require_file, user_cache_dir
from xstage_trace.collectors.compressed import ZST_SUFFIX, decompressed_export
from xstage_trace.collectors.nsys_names import parse_version
from xstage_trace.base.errors import InputError

REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
_VERSION_RE = re.compile(rb"(20[12]\d\.\d+\.\d+\.\d+)-\d+")
_NSYS_GLOBS = ("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
               "/usr/local/cuda*/bin/nsys")


def report_version(path: Path) -> str | None:
    """The nsys version that wrote a report, when its first protobuf messages name it."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
    if not head.startswith(REPORT_MAGIC):
        raise InputError(path, "not an Nsight Systems report (bad magic)", "pass a .nsys-rep written by nsys profile")
    m = _VERSION_RE.search(head)
    return m.group(1).decode() if m else None


def find_nsys(explicit: str | None = None) -> str | None:
    """The nsys binary: --nsys PATH, else nsys on PATH, else the usual install folders."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("nsys")
    if found:
        return found
    from glob import glob

    for pattern in _NSYS_GLOBS:
        hits = sorted(glob(pattern))
        if hits:
            return hits[-1]
    return None


def nsys_version(nsys: str) -> str | None:
    """Version printed by ``nsys --version``."""
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d{4}\.\d+\.\d+(\.\d+)?)", out)
    return m.group(1) if m else None


NAME_MAX_BYTES = 255
# Room the cache name leaves for what is added to it: the sidecar suffix and the temporary
# folder's ".NAME.PID.XXXXXXXX.tmp".
_NAME_RESERVE_BYTES = 48
SIDECAR_SUFFIX = ".export.json"  # REPORT.<hex>.sqlite → REPORT.<hex>.export.json (no glob for *.sqlite* finds it)
MAX_SIDECAR_BYTES = 4096


def cache_name(report: Path, digest: str) -> str:
    """File name of the SQLite export of ``report``: ``REPORT.<16 hex of its sha256>.sqlite``, or
    ``<32 hex>.nsys-rep.sqlite`` when the report's own name is too long to carry (NAME_MAX)."""
    name = f"{report.name}.{digest[:16]}.sqlite"
    if len(os.fsencode(name)) + _NAME_RESERVE_BYTES > NAME_MAX_BYTES:
        name = f"{digest[:32]}.nsys-rep.sqlite"
    return name


def cached_export_path(report: Path, digest: str) -> Path:
    """Where the SQLite export of ``report`` is cached: beside it, keyed by the report's hash."""
    return report.with_name(cache_name(report, digest))


def _regular_no_follow(path: Path) -> bool:
    """True when ``path`` itself (not a symlink's target) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def sidecar_path(cache: Path) -> Path:
    """The sidecar of a cached export: the report's and the export's sha256, written after the export."""
    return cache.with_name(cache.name.removesuffix(".sqlite") + SIDECAR_SUFFIX)


def trusted_export(cache: Path, digest: str, content: Path | None = None) -> bool:
    """A cached export is used only when it and its sidecar are regular files (no symlink is
    followed), the sidecar names this report's full sha256, and the export's bytes hash to the
    sha256 the sidecar recorded when it was written (a stale, truncated or planted file fails).
    ``content``: the decompressed bytes of a shipped ``cache.zst``, checked against the same sidecar."""
    sidecar = sidecar_path(cache)
    content = cache if content is None else content
    if not (_regular_no_follow(content) and _regular_no_follow(sidecar)) or os.lstat(sidecar).st_size > MAX_SIDECAR_BYTES:
        return False
    try:
        doc = loads(sidecar.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(doc, dict) or doc.get("report_sha256") != digest:
        return False
    try:
        return sha256_of(content, follow_symlinks=False) == doc.get("export_sha256")
    except OSError:
        return False


def _private_dir(path: Path) -> bool:
    """Create ``path`` (0700) if needed; True when it is then a real folder of this user."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _workspace(report: Path, cache_file: str, folders: list[Path]) -> Path:
    """A fresh temporary folder (unpredictable name, 0700) in the first folder that takes one."""
    for folder in folders:
        if folder != folders[0] and not _private_dir(folder):
            continue
        remove_stale_temporaries(folder / cache_file)
        try:
            return Path(tempfile.mkdtemp(prefix=f".{cache_file}.{os.getpid()}.", suffix=".tmp", dir=folder))
        except OSError:  # read-only or full: try the next folder
            continue
    raise InputError(report, f"cannot write its SQLite export beside it nor in {folders[-1]} (read-only, or not a real folder of this user)",
                     "point XDG_CACHE_HOME at a writable folder of yours, or export by hand and pass the .sqlite")


def export_report(report: str | Path, nsys: str | None = None) -> tuple[Path, dict]:
    """SQLite export of a .nsys-rep (from a verified cache when the report is unchanged); returns (path, info).

    The export is cached beside the report, or in user_cache_dir() when the report's folder is
    read-only, together with a sidecar holding the report's and the export's sha256."""
    report = require_file(report)
    rep_ver = report_version(report)
    digest = sha256_of(report)
    name = cache_name(report, digest)
    candidates = [report.parent / name, user_cache_dir() / name]
    info = {"report_sha256": digest, "report_nsys_version": rep_ver, "export": str(candidates[0])}
    for hit in candidates:
        shipped = hit.with_name(hit.name + ZST_SUFFIX)  # a shipped export, compressed beside its sidecar
        if not trusted_export(hit, digest) and _regular_no_follow(shipped):
            plain = decompressed_export(shipped)
            if trusted_export(hit, digest, content=plain):
                info.update(cached=True, export=str(shipped))
                return plain, info
        if trusted_export(hit, digest):
            info.update(cached=True, export=str(hit))
            return hit, info
    exe = find_nsys(nsys)
    if exe is None:
        raise InputError(report, "reading a .nsys-rep needs Nsight Systems (nsys not found; pass --nsys PATH)",
                         f"or export it where nsys runs: nsys export --type sqlite -o {report.stem}.sqlite {report.name}, then pass the .sqlite")
    have = nsys_version(exe)
    info["nsys_version"] = have
    if rep_ver and have and parse_version(have) < parse_version(rep_ver):
        raise InputError(report, f"report written by nsys {rep_ver} but {exe} is {have}", f"use nsys {rep_ver} or newer (--nsys PATH)")
    work = _workspace(report, name, [report.parent, user_cache_dir()])
    try:
        out = work / "export.sqlite"
        # Absolute paths: a report named "-x.nsys-rep" must not read as an option to nsys.
        try:
            proc = subprocess.run([exe, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out.absolute()), str(report.absolute())],
                                  capture_output=True, text=True, timeout=3600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InputError(report, f"nsys export failed to run ({exc})", "check the nsys installation or export by hand and pass the .sqlite") from None
        if proc.returncode != 0 or not _regular_no_follow(out):
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise InputError(report, f"nsys export exited {proc.returncode}: {last[0]}", "export it with a matching nsys by hand and pass the .sqlite")
        os.chmod(out, 0o666 & ~current_umask())
        sidecar = work / "sidecar"
        sidecar.write_text(dumps({"report": report.name, "report_sha256": digest, "export_sha256": sha256_of(out)}))
        cache = work.parent / name
        try:
            os.replace(out, cache)  # the export first: without its sidecar it is never trusted
            os.replace(sidecar, sidecar_path(cache))
        except OSError as exc:
            raise InputError(report, f"cannot store its export as {cache} ({exc.strerror or exc})",
                             "remove what is in the way there, or export by hand and pass the .sqlite") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["export"] = str(cache)
    info["cached"] = False
    return cache, info
