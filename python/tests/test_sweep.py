"""Local sweeps: the same table whatever the thread count, resumable through the
store, the same as the CLI's `foliolab sweep`."""

import io
import subprocess
import sys

import pandas as pd
import pytest

import foliolab


def small(tiny, db, **kw):
    return foliolab.sweep(
        tiny, variants={"zap": ["per-pte", "batched"]}, kernels=["6.12", "6.18"], machines=["altra-metal"], db=db, **kw
    )


def test_the_table_is_the_same_on_one_thread_and_on_every_core(tiny, tmp_path):
    one = small(tiny, tmp_path / "one.db", jobs=1)
    every = small(tiny, tmp_path / "every.db", jobs=4)
    assert (len(one.points), one.ran, every.ran, one.failed) == (8, 8, 8, [])
    assert one.to_arrow().equals(every.to_arrow())
    df = one.to_pandas()
    assert list(df.columns) == ["point", "input", "target", "kernel", "machine", "zap", "phase", "counter", "value"]
    assert sorted(df.point.unique()) == list(range(8))
    assert (df[df.counter == "time_ps.total"].value > 0).all()


def test_a_rerun_runs_only_what_is_not_stored(tiny, db):
    first = small(tiny, db)
    again = small(tiny, db)
    assert (first.ran, first.stored, again.ran, again.stored) == (8, 0, 0, 8)
    assert first.to_arrow().equals(again.to_arrow())
    wider = foliolab.sweep(tiny, variants={"zap": ["per-pte", "batched"]}, kernels=["6.1", "6.12", "6.18"],
                           machines=["altra-metal"], db=db)
    assert (wider.ran + len(wider.failed), wider.stored) == (4, 8), "6.1's four points run (the 64K one fails there)"


def test_each_point_is_its_run(tiny, db):
    r = small(tiny, db)
    df = r.to_pandas()
    p = r.points[3]
    one = foliolab.run(tiny[0], variants=dict(p["variants"]), kernel=p["kernel"], machine=p["machine"], store=False)
    mine = df[(df.point == 3) & (df.phase == "")].set_index("counter")["value"]
    assert {k: mine[k] for k in one.counters} == one.counters


def test_the_spec_file_and_the_cli_give_the_same_table(tiny, tmp_path, cli):
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'workloads = ["{tiny[0].name}", "{tiny[1].name}"]\nkernels = ["6.12", "6.18"]\nmachines = ["altra-metal"]\n'
        '[variants]\nzap = ["per-pte", "batched"]\n'
    )
    py = foliolab.sweep(spec=spec, db=tmp_path / "py.db")
    out = tmp_path / "cli.csv"
    cli("--db", str(tmp_path / "cli.db"), "sweep", str(spec), "--out", str(out), store=True)
    c = pd.read_csv(out, keep_default_na=False, dtype={"kernel": str})
    p = py.to_pandas()
    assert list(c.columns) == list(p.columns)
    assert c.to_dict("list") == p.to_dict("list")
    again = cli("--db", str(tmp_path / "py.db"), "sweep", str(spec), store=True).stdout
    assert "0 run, 8 already stored" in again, "the CLI reuses the points Python stored: same build, same keys"


def test_parquet_round_trips(tiny, db, tmp_path):
    r = small(tiny, db)
    r.to_parquet(tmp_path / "t.parquet")
    assert pd.read_parquet(tmp_path / "t.parquet").equals(r.to_pandas())


def test_bad_sweeps_raise(tiny, db):
    with pytest.raises(foliolab.FoliolabError, match="variants.zap"):
        foliolab.sweep(tiny, variants={"zap": ["sideways"]}, db=db)
    bad = tiny[0].parent / "bad.wl"
    bad.write_text("mmap buf 64K\ntouch nothere\n")
    with pytest.raises(foliolab.WorkloadError) as e:
        foliolab.sweep([bad], db=db)
    assert (e.value.line, e.value.column) == (2, 7)


def test_a_failing_point_is_reported_and_the_rest_are_stored(tiny, db):
    """6.1 has no mTHP knobs: the 64K workload fails there, the others run."""
    r = foliolab.sweep(tiny, kernels=["6.1", "6.18"], db=db)
    assert [i for i, _ in r.failed] == [0]
    assert "no such knob" in r.failed[0][1]
    assert r.ran == 3 and sorted(r.to_pandas().point.unique()) == [1, 2, 3]


def test_python_m_foliolab_sweep(tiny, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text(f'workloads = ["{tiny[1].name}"]\n[variants]\nzap = ["per-pte", "batched"]\n')
    out = subprocess.run(
        [sys.executable, "-m", "foliolab", "sweep", str(spec), "--db", str(tmp_path / "m.db"), "--out", str(tmp_path / "t.parquet")],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "2 points: 2 run" in out.stdout
    assert len(pd.read_parquet(tmp_path / "t.parquet")) > 0
