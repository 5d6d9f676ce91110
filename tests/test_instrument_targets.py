"""``instrument apply`` under the output policy (issue 25): a symlinked or read-only target is refused
before anything changes (no stale ``.xstage-recipe/*.json``), a write that fails midway leaves the tree
as it was, and ``--revert`` restores exactly what was there (bytes, modes, links)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xstage_trace.base.errors import InputError
from xstage_trace.instrument.recipes import engine, get

KERNEL = "deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh"


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xstage_trace", *map(str, args)], capture_output=True, text=True)


def tree_state(root: Path) -> dict:
    """Every entry under ``root``: kind, mode, and bytes or link target (what --revert must restore)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        what = os.readlink(p) if stat.S_ISLNK(st.st_mode) else (p.read_bytes() if stat.S_ISREG(st.st_mode) else "dir")
        out[p.relative_to(root).as_posix()] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), what)
    return out


def refused(r: subprocess.CompletedProcess, name: str) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr and name in lines[0], r.stderr
    return lines[0]


def test_a_symlinked_target_file_is_refused_before_anything_changes(dg_tree: Path, tmp_path: Path):
    outside = tmp_path / "shared_kernel.cuh"
    shutil.move(dg_tree / KERNEL, outside)
    (dg_tree / KERNEL).symlink_to(outside)
    before, outside_bytes = tree_state(dg_tree), outside.read_bytes()
    line = refused(cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree), str(dg_tree / KERNEL))
    assert "symbolic link" in line and "copy" in line
    assert tree_state(dg_tree) == before and outside.read_bytes() == outside_bytes


def test_a_symlinked_folder_on_the_way_is_refused(dg_tree: Path, tmp_path: Path):
    impls = dg_tree / "deep_gemm/include/deep_gemm/impls"
    shutil.move(impls, tmp_path / "impls")
    impls.symlink_to(tmp_path / "impls")
    before = tree_state(dg_tree)
    refused(cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree), str(impls))
    assert tree_state(dg_tree) == before


def test_a_read_only_target_file_is_refused(dg_tree: Path):
    (dg_tree / KERNEL).chmod(0o444)
    before = tree_state(dg_tree)
    line = refused(cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree), str(dg_tree / KERNEL))
    assert "read-only" in line
    assert tree_state(dg_tree) == before and not (dg_tree / ".xstage-recipe").exists()


def test_a_read_only_folder_leaves_no_stale_recipe_manifest(dg_tree: Path):
    dg_tree.chmod(0o555)  # .xstage-recipe/ and csrc/xstage/ cannot be created there
    try:
        before = tree_state(dg_tree)
        refused(cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree), "read-only")
        assert tree_state(dg_tree) == before and not (dg_tree / ".xstage-recipe").exists()
    finally:
        dg_tree.chmod(0o755)


def test_a_write_failing_midway_leaves_the_tree_as_it_was(dg_tree: Path, monkeypatch):
    before = tree_state(dg_tree)
    real, calls = engine._write, []

    def full_disk(path, data):
        calls.append(path)
        if len(calls) == 4:  # the manifest and two files written, then the disk fills
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(engine, "_write", full_disk)
    with pytest.raises(InputError, match="disk is full"):
        engine.apply(engine.plan(get("deepgemm-sm90"), dg_tree))
    monkeypatch.setattr(engine, "_write", real)
    assert tree_state(dg_tree) == before


def test_revert_restores_bytes_modes_and_links_exactly(dg_tree: Path, tmp_path: Path):
    (dg_tree / KERNEL).chmod(0o640)
    (dg_tree / "notes.txt").write_text("the user's own file\n")
    (dg_tree / "latest").symlink_to("deep_gemm/include")  # a link the recipe does not touch
    before = tree_state(dg_tree)
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(dg_tree / KERNEL).st_mode) == 0o640 and tree_state(dg_tree) != before
    r = cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree, "--revert")
    assert r.returncode == 0, r.stderr
    assert tree_state(dg_tree) == before


def test_revert_into_a_read_only_file_changes_nothing(dg_tree: Path):
    assert cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree).returncode == 0
    (dg_tree / KERNEL).chmod(0o444)
    before = tree_state(dg_tree)
    refused(cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree, "--revert"), str(dg_tree / KERNEL))
    assert tree_state(dg_tree) == before


def test_an_added_file_of_the_users_is_never_replaced(dg_tree: Path):
    p = engine.plan(get("deepgemm-sm90"), dg_tree)
    rel = next(iter(p.added))
    (dg_tree / rel).parent.mkdir(parents=True, exist_ok=True)
    (dg_tree / rel).write_text("// the user's own header\n")
    before = tree_state(dg_tree)
    refused(cli("instrument", "apply", "--target", "deepgemm-sm90", "--src", dg_tree), str(dg_tree / rel))
    assert tree_state(dg_tree) == before
