"""Sweeps: workloads or traces × variants × kernels × machines × targets, each point one
run, kept in the results store the moment it finishes under a key of its inputs and the
build; a rerun runs only what is not stored.

Backends: "local" (the Rust executor on every core, the GIL released) and "ray" (each
point a Ray task calling the same core; points on a real kernel ask for the Ray resource
`foliolab_host` or `foliolab_qemu`, so only workers started with it run them).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    import polars
    import pyarrow

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class SweepResult:
    """A sweep's points, their results and what happened to each.

    The table (`to_pandas`, `to_arrow`, `to_parquet`, `to_polars`) is long and tidy: a
    row per point, phase and counter, with columns point, input, target, kernel,
    machine, one per swept variant, phase ("" = whole run), counter, value (int64).
    Modeled time is in exact integer picoseconds as `time_ps.total` and
    `time_ps.<event>` counters. Rows are in point order, whatever order points finished
    in."""

    #: Each point: input, variants, sets, kernel, machine, target (its place is `index`).
    points: List[Dict[str, Any]]
    #: Each point's result as the CLI's JSON (None if it failed).
    results: List[Optional[str]]
    #: Points run by this sweep.
    ran: int
    #: Points found in the store and not run again.
    stored: int
    #: Points that failed this time: (index, why). Rerunning the sweep retries them.
    failed: List[Tuple[int, str]]
    #: Wall time of the sweep, seconds.
    seconds: float
    _arrow: Any = field(default=None, repr=False)

    def to_arrow(self) -> "pyarrow.Table":
        if self._arrow is None:
            import pyarrow as pa

            cols = _core.table(json.dumps(self.points), "[" + ",".join(r or "null" for r in self.results) + "]")
            arrays = {n: pa.array(v, type=pa.int64() if n in ("point", "value") else pa.string()) for n, v in cols}
            self._arrow = pa.table(arrays)
        return self._arrow

    def to_pandas(self) -> "pandas.DataFrame":
        return self.to_arrow().to_pandas()

    def to_polars(self) -> "polars.DataFrame":
        import polars as pl

        return pl.from_arrow(self.to_arrow())

    def to_parquet(self, path: PathLike) -> None:
        import pyarrow.parquet as pq

        pq.write_table(self.to_arrow(), os.fspath(path))


def _progress(total: int, enabled: Optional[bool]) -> Tuple[Callable[[int, int], None], Callable[[], None]]:
    """A tqdm bar (terminal or notebook) over the points, or nothing."""
    if enabled is False or (enabled is None and total < 20):
        return (lambda done, total: None), (lambda: None)
    from tqdm.auto import tqdm

    bar = tqdm(total=total, unit="point", desc="sweep")

    def tick(done: int, _total: int) -> None:
        bar.update(done - bar.n)

    return tick, bar.close


def sweep(
    workloads: Sequence[PathLike] = (),
    *,
    traces: Sequence[PathLike] = (),
    variants: Mapping[str, Sequence[object]] = {},
    kernels: Sequence[str] = (),
    machines: Sequence[str] = (),
    targets: Sequence[str] = (),
    sets: Mapping[str, object] = {},
    spec: Optional[PathLike] = None,
    backend: str = "local",
    address: Optional[str] = None,
    jobs: Optional[int] = None,
    retries: int = 3,
    db: Optional[PathLike] = None,
    store: bool = True,
    progress: Optional[bool] = None,
) -> SweepResult:
    """Runs every point of the product, skipping those the store holds.

    `spec` reads a SPEC.toml as `foliolab sweep SPEC.toml` does (then the other inputs
    must be empty). Model points are the full product; a real-kernel target ("host",
    "qemu-arm64", ...) gets one point per workload. `backend="local"` uses `jobs`
    threads (default: every core); `backend="ray"` sends each point to the Ray cluster
    at `address` as a task (`retries`: Ray's max_retries when a worker dies). The store
    is `db`, else $FOLIOLAB_DB, else the user's, as for the CLI; `store=False` keeps the
    points in memory only. `progress`: a progress bar (default: for 20 points or more).
    """
    if spec is not None:
        if workloads or traces or variants or kernels or machines or targets or sets:
            raise ValueError("sweep: give spec= or the inputs, not both")
        spec_json, base = _core.load_spec(os.fspath(spec))
    else:
        spec_json = json.dumps(
            {
                "workloads": [os.fspath(w) for w in workloads],
                "traces": [os.fspath(t) for t in traces],
                "variants": {k: [str(v) for v in vs] for k, vs in variants.items()},
                "sets": [f"{k}={v}" for k, v in sets.items()],
                "kernels": list(kernels),
                "machines": list(machines),
                "targets": list(targets),
            }
        )
        base = os.getcwd()
    points_json = _core.sweep_points(spec_json, base)
    points: List[Dict[str, Any]] = json.loads(points_json)
    dbs = None if db is None else os.fspath(db)
    tick, close = _progress(len(points), progress)
    start = time.perf_counter()
    try:
        if backend == "local":
            results_json, ran, stored, failed = _core.sweep_local(
                points_json, jobs or os.cpu_count() or 1, dbs, store, tick
            )
            results = [None if r is None else json.dumps(r) for r in json.loads(results_json)]
        elif backend == "ray":
            if not store:
                raise ValueError("sweep: the ray backend keeps its points in the results store (store=True)")
            results, ran, stored, failed = _ray(points, dbs, address, retries, tick)
        else:
            raise ValueError(f"sweep: backend {backend!r}: expected 'local' or 'ray'")
    finally:
        close()
    return SweepResult(points, results, ran, stored, sorted(failed), time.perf_counter() - start)


def _ray_point(point: str) -> Tuple[str, float]:
    """A Ray task: one point, run by the same core as the local backend."""
    start = time.perf_counter()
    result = _core.run_point(point)
    return result, (time.perf_counter() - start) * 1e3


def _ray(
    points: List[Dict[str, Any]],
    db: Optional[str],
    address: Optional[str],
    retries: int,
    tick: Callable[[int, int], None],
) -> Tuple[List[Optional[str]], int, int, List[Tuple[int, str]]]:
    """Each point not stored becomes a task; each result is stored by this process (the
    driver) as it arrives, so a worker killed mid-sweep loses only its own point."""
    import ray

    texts = [json.dumps(p) for p in points]
    infos = [_core.point_info(t) for t in texts]
    results: List[Optional[str]] = list(_core.stored([k for k, _ in infos], db, True))
    stored = sum(r is not None for r in results)
    started = not ray.is_initialized()
    if started:
        # A cluster reached on loopback is one on this machine bound to it (as the tests
        # start it): the driver's own node address must be loopback too.
        local = address is not None and address.split(":")[0] in ("127.0.0.1", "localhost")
        extra = {"_node_ip_address": "127.0.0.1"} if local else {}
        ray.init(address=address, log_to_driver=False, configure_logging=False, **extra)
    try:
        task = ray.remote(_ray_point)
        pending = {}
        for i, (text, (_, needs)) in enumerate(zip(texts, infos)):
            if results[i] is None:
                resources = {f"foliolab_{needs}": 1} if needs else {}
                ref = task.options(num_cpus=1, max_retries=retries, resources=resources).remote(text)
                pending[ref] = i
        done, failed = stored, []
        tick(done, len(points))
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    result, wall_ms = ray.get(ref)
                except Exception as e:  # a Ray task's error, or a worker that died
                    failed.append((i, f"{type(e).__name__}: {e}"))
                else:
                    _core.store_point(texts[i], result, wall_ms, db)
                    results[i] = result
                done += 1
                tick(done, len(points))
        ran = len(points) - stored - len(failed)
        return results, ran, stored, failed
    finally:
        if started:
            ray.shutdown()
