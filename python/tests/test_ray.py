"""The Ray backend on a local cluster bound to 127.0.0.1: two worker processes, a real
sweep through it, and a worker killed with SIGKILL mid-sweep.

The cluster is this test's own: started with `ray start --head --block` in a new
session, stopped by signalling that process group (and any process left with this
cluster's temp dir, by pid) — never `ray stop`, which stops every Ray process on the
machine."""

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import foliolab

# Ray reads it when imported: with it, every Ray process binds to and is reached on the
# --node-ip-address given (127.0.0.1), not the machine's network address.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
if not os.environ.get("FOLIOLAB_REQUIRE_RAY"):
    pytest.importorskip("ray", reason="ray is not installed (pip install ./python[ray])")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def procs_with(text):
    """Pids of processes whose command line mentions `text`."""
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    pids.append(int(d.name))
            except OSError:
                pass
    return pids


def listeners(pids):
    """(address, pid) of every TCP socket the processes `pids` listen on."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        for pid in pids:
            if f"pid={pid}," in line:
                found.append((line.split()[3], pid))
    return found


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="flr-", dir="/tmp")
    port = free_port()
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    ray_bin = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"],
        env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            ok = subprocess.run([ray_bin, "status", f"--address={address}"], env=env, capture_output=True).returncode == 0
            if ok:
                break
            assert head.poll() is None, "ray start --head exited"
            assert time.time() < deadline, "the Ray head did not come up in 90 s"
            time.sleep(1)
        yield {"address": address, "tmp": tmp, "head": head}
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        time.sleep(1)
        for pid in procs_with(tmp):
            os.kill(pid, signal.SIGKILL)
        left = procs_with(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        assert not left, f"Ray processes left: {left}"


def test_every_ray_process_listens_on_loopback_only(cluster):
    pids = procs_with(cluster["tmp"]) + [cluster["head"].pid]
    found = listeners(pids)
    assert found, "no listening Ray sockets found: is ss measuring the right processes?"
    loopback = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")
    wide = [(a, p) for a, p in found if not a.startswith(loopback)]
    assert not wide, f"Ray listens beyond loopback: {wide}"


def test_a_ray_sweep_gives_the_local_table(cluster, tiny, tmp_path):
    kw = dict(variants={"zap": ["per-pte", "batched"]}, kernels=["6.12", "6.18"], machines=["altra-metal"])
    local = foliolab.sweep(tiny, db=tmp_path / "local.db", **kw)
    r = foliolab.sweep(tiny, backend="ray", address=cluster["address"], db=tmp_path / "ray.db", **kw)
    assert (r.ran, r.stored, r.failed) == (8, 0, [])
    assert r.to_arrow().equals(local.to_arrow())
    again = foliolab.sweep(tiny, backend="ray", address=cluster["address"], db=tmp_path / "ray.db", **kw)
    assert (again.ran, again.stored) == (0, 8)


def test_a_worker_killed_mid_sweep_costs_only_its_point(cluster, tmp_path):
    """SIGKILL of the worker running a point (no retries): that point is lost, every
    finished one is stored, and the rerun runs only the lost ones."""
    w = tmp_path / "slow.wl"
    w.write_text("mmap buf 128M populate\nmark dontneed\nmadvise buf 0 128M dontneed step=4K\n")
    kw = dict(variants={"zap": ["per-pte", "batched"], "contpte": ["on", "off"], "tlb-batch": ["sync", "deferred"]},
              backend="ray", address=cluster["address"], db=tmp_path / "kill.db", retries=0, progress=False)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("r", foliolab.sweep([w], **kw)))
    t.start()
    killed = None
    deadline = time.time() + 120
    while killed is None and t.is_alive() and time.time() < deadline:
        busy = procs_with("ray::_ray_point")
        if busy:
            os.kill(busy[0], signal.SIGKILL)
            killed = busy[0]
        time.sleep(0.05)
    t.join()
    assert killed is not None, "no worker was seen running a point"
    first = result["r"]
    lost = [i for i, _ in first.failed]
    print(f"kill -9 of worker {killed}: {len(first.points)} points, {first.ran} stored, {len(lost)} lost {first.failed}")
    assert 1 <= len(lost) <= 2, "only the points the killed worker held are lost"
    assert first.ran + len(lost) == len(first.points)
    rerun = foliolab.sweep([w], **kw)
    print(f"rerun: {rerun.ran} run, {rerun.stored} stored, {len(rerun.failed)} failed, {rerun.to_arrow().num_rows} rows")
    assert (rerun.ran, rerun.stored, rerun.failed) == (len(lost), first.ran, [])
    df = rerun.to_pandas()
    assert sorted(df.point.unique()) == list(range(len(first.points)))
    local = foliolab.sweep([w], **dict(kw, backend="local", db=tmp_path / "local.db"))
    assert rerun.to_arrow().equals(local.to_arrow())
