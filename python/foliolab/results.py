"""Typed results: the CLI's JSON, read into dataclasses that keep the JSON text.

A report's `.to_json()` is the exact text `foliolab ... --json` prints for the same
run; `.to_pandas()` / `.to_polars()` is one tidy table (run, phase, counter, value).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    import polars

#: A layout run: first page, number of pages, and the folio order, "zero" or "swap".
LayoutRun = Tuple[int, int, Union[int, str]]


@dataclass(frozen=True)
class Phase:
    """The counters moved between two `mark`s of a workload."""

    label: str
    counters: Dict[str, int]
    #: Host: wall time in the phase's ops; model with a machine: modeled time.
    time_ns: Optional[float] = None


@dataclass(frozen=True)
class Time:
    """Modeled time on a machine profile (`--machine`)."""

    total_ns: float
    by_event: Dict[str, float]
    machine: str
    #: Counted events the profile has no public cost for (never counted as 0).
    uncosted: List[str]
    machine_variants: Dict[str, str]
    derived_from_seed: Dict[str, str]


def _tidy(rows: List[Tuple[str, str, str, Union[int, float]]], backend: str) -> Any:
    columns = {
        "run": [r[0] for r in rows],
        "phase": [r[1] for r in rows],
        "counter": [r[2] for r in rows],
        "value": [r[3] for r in rows],
    }
    if backend == "polars":
        import polars as pl

        return pl.DataFrame(columns)
    import pandas as pd

    return pd.DataFrame(columns)


@dataclass(frozen=True)
class Report:
    """A run's result (`run`, `native`, `boot`, `replay`): exact counts under the
    kernel's names, per phase, the memory layout, and modeled time with a machine."""

    source: str
    workload: str
    variants: Dict[str, str]
    counters: Dict[str, int]
    phases: List[Phase]
    layout: Dict[str, List[LayoutRun]]
    unavailable: Dict[str, str]
    time: Optional[Time]
    #: Everything else the JSON has (a replay's processes, diagnostics, ...).
    extra: Dict[str, Any] = field(default_factory=dict)
    _json: str = field(default="", repr=False, compare=False)

    @classmethod
    def from_json(cls, text: str) -> "Report":
        d = json.loads(text)
        known = {"source", "workload", "variants", "counters", "phases", "layout", "unavailable", "time"}
        t = d.get("time")
        return cls(
            source=d.get("source", ""),
            workload=d.get("workload", ""),
            variants=d.get("variants", {}),
            counters=d.get("counters", {}),
            phases=[Phase(p["label"], p["counters"], p.get("time_ns")) for p in d.get("phases", [])],
            layout={k: [tuple(r) for r in v] for k, v in d.get("layout", {}).items()},
            unavailable=d.get("unavailable", {}),
            time=Time(**t) if t is not None else None,
            extra={k: v for k, v in d.items() if k not in known},
            _json=text,
        )

    def to_json(self) -> str:
        """The CLI's `--json` text for this run, byte for byte."""
        return self._json

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(self._json)

    def _rows(self, run: str) -> List[Tuple[str, str, str, Union[int, float]]]:
        rows: List[Tuple[str, str, str, Union[int, float]]] = [(run, "", k, v) for k, v in self.counters.items()]
        for p in self.phases:
            rows += [(run, p.label, k, v) for k, v in p.counters.items()]
        if self.time is not None:
            rows.append((run, "", "time_ns.total", self.time.total_ns))
            rows += [(run, "", f"time_ns.{k}", v) for k, v in self.time.by_event.items()]
            rows += [(run, p.label, "time_ns.total", p.time_ns) for p in self.phases if p.time_ns is not None]
        return rows

    def to_pandas(self, run: Optional[str] = None) -> "pandas.DataFrame":
        """One tidy table: run, phase ("" = the whole run), counter, value (modeled
        time as `time_ns.*` counters when a machine was given)."""
        return _tidy(self._rows(run or self.workload), "pandas")

    def to_polars(self, run: Optional[str] = None) -> "polars.DataFrame":
        return _tidy(self._rows(run or self.workload), "polars")


@dataclass(frozen=True)
class Machine:
    """A machine profile (`foliolab machines`)."""

    name: str
    description: str
    cpus: int
    nodes: int
    clock_ghz: float
    features: Dict[str, Any]
    #: The whole profile: TLB geometry, every cost with its quality and source.
    profile: Dict[str, Any]


@dataclass(frozen=True)
class Kernels:
    """The kernel presets (`foliolab kernels --json`)."""

    kernels: List[str]
    #: One per upstream change: key, scope, before, after, since, commits, what.
    changes: List[Dict[str, Any]]
    #: The preset used when none is named (`--kernel` unset).
    default: str
    _json: str = field(default="", repr=False, compare=False)

    def to_json(self) -> str:
        return self._json


@dataclass(frozen=True)
class Reproduction:
    """Every seed table, the seed's figures beside the model's (`reproduce --json`)."""

    rows: List[Dict[str, Any]]
    elapsed_s: float
    extra: Dict[str, Any]
    _json: str = field(default="", repr=False, compare=False)

    def to_json(self) -> str:
        return self._json

    def to_pandas(self) -> "pandas.DataFrame":
        import pandas as pd

        return pd.DataFrame(self.rows)
