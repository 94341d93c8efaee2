"""The Python API against the CLI: the same JSON, typed, errors as exceptions."""

import json
import threading

import pytest

import foliolab
from conftest import REPO

SEED = REPO / "workloads" / "seed000-munmap-64k.wl"


def test_run_counters_are_the_cli_json_counters_key_for_key(cli):
    r = foliolab.run(SEED, variants={"zap": "per-pte"}, store=False)
    out = cli("run", str(SEED), "--set", "zap=per-pte", "--json").stdout
    assert r.counters == json.loads(out)["counters"]
    assert list(r.counters) == list(json.loads(out)["counters"])
    assert r.to_json() == out
    assert r.counters["arch.tlbi.total"] > 0


def test_run_with_kernel_and_machine_is_the_cli_json(cli):
    r = foliolab.run(str(SEED), kernel="6.12", machine="altra-metal", store=False)
    out = cli("run", str(SEED), "--kernel", "6.12", "--machine", "altra-metal", "--json").stdout
    assert r.to_json() == out
    assert r.time is not None and r.time.total_ns > 0 and r.time.machine


def test_a_workload_given_as_text_runs(tmp_path):
    r = foliolab.run("mmap buf 64K\ntouch buf\n", store=False)
    assert r.workload == "<string>"
    assert r.counters["proc.main.minflt"] > 0


def test_to_pandas_is_one_tidy_table():
    r = foliolab.run(SEED, machine="altra-metal", store=False)
    df = r.to_pandas()
    assert list(df.columns) == ["run", "phase", "counter", "value"]
    whole = df[df.phase == ""].set_index("counter")["value"]
    assert whole["arch.tlbi.total"] == r.counters["arch.tlbi.total"]
    assert len(df) == len(r.counters) + sum(len(p.counters) for p in r.phases) + 1 + len(r.time.by_event) + len(r.phases)


def test_a_bad_workload_raises_workload_error_with_line_and_column():
    with pytest.raises(foliolab.WorkloadError) as e:
        foliolab.run("mmap buf 64K\ntouch nothere\n", store=False)
    assert (e.value.path, e.value.line, e.value.column) == ("<string>", 2, 7)
    assert "<string>:2:7:" in str(e.value)
    assert isinstance(e.value, foliolab.FoliolabError)


def test_an_unknown_variant_is_an_exception_not_a_crash():
    with pytest.raises(foliolab.FoliolabError, match="zap"):
        foliolab.run(SEED, variants={"zap": "sideways"}, store=False)


def test_a_missing_file_is_a_workload_error(tmp_path):
    with pytest.raises(foliolab.WorkloadError):
        foliolab.run(tmp_path / "none.wl", store=False)


def test_the_gil_is_released_while_the_model_runs():
    """While a run is in flight on a thread, this thread keeps executing Python: with
    the GIL held it could not until the run returned."""
    started, done = threading.Event(), threading.Event()
    counts = []

    def work():
        started.set()
        foliolab.run("mmap buf 256M populate\nmadvise buf 0 256M dontneed step=4K\n", store=False)
        done.set()

    t = threading.Thread(target=work)
    t.start()
    started.wait()
    n = 0
    while not done.is_set():
        n += 1
        if n % 1000 == 0:
            counts.append(n)
    t.join()
    assert n > 100_000, f"only {n} iterations while the model ran"


def test_runs_are_recorded_in_the_store_unless_told_not_to(db):
    foliolab.run(SEED, db=db)
    import sqlite3

    assert sqlite3.connect(db).execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_boot_is_the_cli_json(cli):
    assert foliolab.boot("1G").to_json() == cli("boot", "--ram", "1G", "--granule", "4K", "--json").stdout


def test_replay_is_the_cli_json(cli):
    trace = REPO / "data" / "sqlite3-cc-O2.trc"
    r = foliolab.replay(trace, store=False)
    out = cli("replay", str(trace), "--json").stdout
    assert r.to_json() == out
    assert r.extra["processes"] and r.counters == json.loads(out)["counters"]


def test_reproduce_one_seed_has_the_cli_rows(cli):
    r = foliolab.reproduce(seeds=["003"], store=False)
    out = json.loads(cli("reproduce", "003", "--json").stdout)
    assert r.rows == out["rows"] and r.rows
    assert len(r.to_pandas()) == len(r.rows)


def test_machines_and_kernels(cli):
    names = [m.name for m in foliolab.machines()]
    assert "altra-metal" in names and all(m.cpus > 0 for m in foliolab.machines())
    k = foliolab.kernels()
    assert k.to_json() == cli("kernels", "--json").stdout
    assert "6.18" in k.kernels
    # The default preset is the newest validated one, a preset like any other.
    assert k.default == "7.3" and k.default in k.kernels


def test_targets_say_why_not():
    t = foliolab.targets()
    assert "host" in t and "qemu-arm64" in t
    assert all(why is None or why for why in t.values())


def test_native_on_the_host_when_it_can():
    why = foliolab.targets()["host"]
    if why:
        print(f"SKIP native on the host: {why}")
        pytest.skip(why)
    r = foliolab.native(REPO / "workloads" / "mthp-fault-64k.wl", store=False)
    assert r.source == "host" and r.counters["proc.main.minflt"] > 0


def test_native_on_a_qemu_guest_when_it_is_set_up():
    why = foliolab.targets()["qemu-arm64"]
    if why:
        print(f"SKIP native on qemu-arm64: {why}")
        pytest.skip(why)
    r = foliolab.native(REPO / "workloads" / "mthp-fault-64k.wl", target="qemu-arm64", store=False)
    assert r.source == "qemu-arm64" and r.counters["proc.main.minflt"] > 0
