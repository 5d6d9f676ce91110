"""``.nsys-rep`` input: export to SQLite with the user's nsys, cached beside the report by its hash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from xstage_trace.base.hashing import sha256_of
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


def cached_export_path(report: Path, digest: str) -> Path:
    """Where the SQLite export of ``report`` is cached: beside it, keyed by the report's hash."""
    return report.with_name(f"{report.name}.{digest[:16]}.sqlite")


def _user_cache(name: str) -> Path:
    """Fallback cache location for reports that sit in read-only folders."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "xstage-trace" / name


def export_report(report: str | Path, nsys: str | None = None) -> tuple[Path, dict]:
    """SQLite export of a .nsys-rep (from cache when the report is unchanged); returns (path, info)."""
    report = Path(report)
    if not report.is_file():
        raise InputError(report, "no such report", "check the path")
    rep_ver = report_version(report)
    digest = sha256_of(report)
    cache = cached_export_path(report, digest)
    info = {"report_sha256": digest, "report_nsys_version": rep_ver, "export": str(cache)}
    for hit in (cache, cache.with_name(cache.name + ".zst"), _user_cache(cache.name)):  # .zst: a shipped, compressed export
        if hit.is_file():
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
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    try:
        proc = subprocess.run([exe, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(tmp), str(report)],
                              capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(report, f"nsys export failed to run ({exc})", "check the nsys installation or export by hand and pass the .sqlite") from None
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)  # nsys can leave a partial, table-less file behind
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InputError(report, f"nsys export exited {proc.returncode}: {last[0]}", "export it with a matching nsys by hand and pass the .sqlite")
    try:
        os.replace(tmp, cache)
    except OSError:
        # Read-only folder beside the report: keep the export in the user's cache instead.
        alt = _user_cache(cache.name)
        alt.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp), alt)
        cache = alt
    info["export"] = str(cache)
    info["cached"] = False
    return cache, info
