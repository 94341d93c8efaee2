"""foliolab from Python: the deterministic arm64 mm model, in-process.

    import foliolab
    r = foliolab.run("workloads/seed000-munmap-64k.wl", variants={"zap": "per-pte"})
    r.counters["arch.tlbi.total"]          # the CLI JSON's counters, key for key
    r.to_pandas()                          # run, phase, counter, value
    foliolab.sweep(workloads=[...], variants={"zap": ["per-pte", "batched"]}).to_pandas()

Every call runs the model in this process with the GIL released; errors are
exceptions (`WorkloadError` has `.path`, `.line`, `.column`).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Mapping, Optional, Sequence, Union

from . import _core
from ._core import FoliolabError, InternalError, WorkloadError
from .results import Kernels, Machine, Phase, Report, Reproduction, Time
from .sweep import SweepResult, sweep

__all__ = [
    "FoliolabError",
    "InternalError",
    "Kernels",
    "Machine",
    "Phase",
    "Report",
    "Reproduction",
    "SweepResult",
    "Time",
    "WorkloadError",
    "boot",
    "build",
    "kernels",
    "machines",
    "native",
    "replay",
    "reproduce",
    "run",
    "sweep",
    "targets",
]

PathLike = Union[str, "os.PathLike[str]"]


def build() -> str:
    """This build's identity (the version and a hash of its sources), part of every
    sweep point's key in the results store."""
    return _core.build()


def _sets(variants: Mapping[str, object]) -> List[str]:
    return [f"{k}={v}" for k, v in variants.items()]


def _store_args(db: Optional[PathLike], store: bool) -> List[str]:
    args = ["--db", os.fspath(db)] if db is not None else []
    return args + ([] if store else ["--no-store"])


def _is_path(workload: Union[str, "os.PathLike[str]"]) -> bool:
    if not isinstance(workload, str):
        return True
    return "\n" not in workload and (workload.endswith(".wl") or os.path.exists(workload))


def run(
    workload: Union[str, "os.PathLike[str]"],
    *,
    variants: Mapping[str, object] = {},
    kernel: Optional[str] = None,
    machine: Optional[str] = None,
    db: Optional[PathLike] = None,
    store: bool = True,
) -> Report:
    """Runs a workload (a path, or the workload's text) on the model, as `foliolab run
    WORKLOAD --set K=V ... [--kernel K] [--machine M] --json`. Recorded in the results
    store like the CLI's runs (`db`, else $FOLIOLAB_DB, else the user's) unless
    `store=False`."""
    if _is_path(workload):
        path, text = os.fspath(workload), None
    else:
        path, text = "<string>", str(workload)
    out = _core.run(path, text, _sets(variants), kernel, machine, None if db is None else os.fspath(db), store)
    return Report.from_json(out)


def replay(
    trace: PathLike,
    *,
    thp: Mapping[str, str] = {},
    variants: Mapping[str, object] = {},
    kernel: Optional[str] = None,
    machine: Optional[str] = None,
    db: Optional[PathLike] = None,
    store: bool = True,
) -> Report:
    """Drives the model with a trace written by `foliolab record` (`foliolab replay
    --json`); `thp` sets knobs over the recorded ones, e.g. {"hugepages-64kB/enabled":
    "always"}. The per-process lines are in `.extra["processes"]`."""
    argv = [os.fspath(trace), "--json"] + [a for s in _sets(variants) for a in ("--set", s)]
    argv += [a for k, v in thp.items() for a in ("--thp", f"{k}={v}")]
    argv += ["--kernel", kernel] if kernel else []
    argv += ["--machine", machine] if machine else []
    return Report.from_json(_core.command("replay", argv + _store_args(db, store)))


def boot(
    ram: str,
    *,
    granule: str = "4K",
    variants: Mapping[str, object] = {},
    kernel: Optional[str] = None,
    target: Optional[str] = None,
    holes: Sequence[str] = (),
) -> Report:
    """Builds the kernel linear map of a machine with `ram` of memory (`foliolab boot
    --ram RAM --json`); with a QEMU `target` the guest boots too."""
    argv = ["--ram", ram, "--granule", granule, "--json"] + [a for s in _sets(variants) for a in ("--set", s)]
    argv += ["--kernel", kernel] if kernel else []
    argv += ["--target", target] if target else []
    argv += ["--holes", ",".join(holes)] if holes else []
    return Report.from_json(_core.command("boot", argv))


def reproduce(
    seeds: Optional[Sequence[str]] = None,
    *,
    kernel: Optional[str] = None,
    software: Optional[str] = None,
    db: Optional[PathLike] = None,
    store: bool = True,
) -> Reproduction:
    """Every seed table (or those of `seeds`, e.g. ["000"]) with the model's figures
    beside the seed's (`foliolab reproduce --json`), on `kernel`'s preset (default: the
    CLI's, `kernels().default`)."""
    argv = list(seeds or []) + ["--json"] + (["--kernel", kernel] if kernel else [])
    argv += ["--software", software] if software else []
    out = _core.command("reproduce", argv + _store_args(db, store))
    d = json.loads(out)
    extra = {k: v for k, v in d.items() if k not in ("rows", "elapsed_s")}
    return Reproduction(d["rows"], d["elapsed_s"], extra, out)


def native(
    workload: PathLike,
    *,
    target: str = "host",
    db: Optional[PathLike] = None,
    store: bool = True,
) -> Report:
    """Runs a workload file on a real kernel: this host's (root, writable THP sysfs) or
    a QEMU guest (`targets()` says which this machine has), as `foliolab native
    --json`."""
    out = _core.command("native", [os.fspath(workload), "--target", target, "--json"] + _store_args(db, store))
    return Report.from_json(out)


def targets() -> Dict[str, Optional[str]]:
    """The real-kernel targets (host and the QEMU guests) and why each cannot run on
    this machine (None: it can)."""
    return dict(_core.targets())


def machines() -> List[Machine]:
    """The built-in machine profiles (`foliolab machines`)."""
    return [
        Machine(p["name"], p["description"], p["cpus"], p.get("nodes", 1), p["clock_ghz"], p["features"], p)
        for p in json.loads(_core.machines())
    ]


def kernels() -> Kernels:
    """The kernel presets and the upstream changes each sets (`foliolab kernels --json`)."""
    out = _core.command("kernels", ["--json"])
    d = json.loads(out)
    return Kernels(d["kernels"], d["changes"], d["default"], out)
