"""Shared fixtures: the repository, the CLI to compare with, a scratch results store."""

import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def cli_path():
    """The foliolab CLI: $FOLIOLAB_BIN (CI sets it; then it must exist), else a build in
    the repository's target directory."""
    given = os.environ.get("FOLIOLAB_BIN")
    if given:
        assert os.access(given, os.X_OK), f"FOLIOLAB_BIN={given} is not an executable"
        return given
    for profile in ("release", "pyext", "debug"):
        p = REPO / "target" / profile / "foliolab"
        if p.exists():
            return str(p)
    return shutil.which("foliolab")


@pytest.fixture
def cli():
    """Runs the CLI (with --no-store unless `store`) and returns the finished process."""
    path = cli_path()
    if path is None:
        pytest.skip("no foliolab CLI to compare with (set FOLIOLAB_BIN or cargo build)")

    def run(*args, check=True, store=False):
        flags = [] if store else ["--no-store"]
        out = subprocess.run([path, *flags, *args], cwd=REPO, capture_output=True, text=True)
        if check:
            assert out.returncode == 0, out.stderr
        return out

    run.path = path
    return run


@pytest.fixture
def db(tmp_path):
    return tmp_path / "results.db"


@pytest.fixture
def tiny(tmp_path):
    """Two small workloads (milliseconds each on the model)."""
    a = tmp_path / "fault-64k.wl"
    a.write_text("set hugepages-64kB/enabled always\nmmap buf 8M\ntouch buf\nmark unmap\nmunmap buf\n")
    b = tmp_path / "fault-4k.wl"
    b.write_text("mmap buf 8M populate\nmark dontneed\nmadvise buf 0 8M dontneed step=64K\n")
    return [a, b]
