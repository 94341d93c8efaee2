"""`python -m foliolab sweep SPEC.toml [--ray ADDRESS] [--jobs N] [--out T.parquet|.csv]
[--db PATH]`: the Python side of `foliolab sweep`, which runs it for `--ray`."""

from __future__ import annotations

import argparse
import sys

from . import FoliolabError, sweep


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foliolab")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="run a sweep spec")
    s.add_argument("spec")
    s.add_argument("--ray", metavar="ADDRESS", help="a Ray cluster, e.g. 127.0.0.1:6379")
    s.add_argument("--jobs", type=int)
    s.add_argument("--out", metavar="PATH", help="the table as .parquet or .csv")
    s.add_argument("--db", metavar="PATH")
    a = p.parse_args(argv)
    try:
        r = sweep(
            spec=a.spec,
            backend="ray" if a.ray else "local",
            address=a.ray,
            jobs=a.jobs,
            db=a.db,
        )
    except FoliolabError as e:
        print(f"foliolab: {e}", file=sys.stderr)
        return 2
    print(
        f"{len(r.points)} points: {r.ran} run, {r.stored} already stored, {len(r.failed)} failed; "
        f"{r.seconds:.2f} s ({'ray ' + a.ray if a.ray else 'local'})"
    )
    for i, why in r.failed:
        print(f"point {i} ({r.points[i]['input']['path']}): {why}")
    if a.out:
        if a.out.endswith(".csv"):
            r.to_pandas().to_csv(a.out, index=False)
        else:
            r.to_parquet(a.out)
        print(f"table: {r.to_arrow().num_rows} rows in {a.out}")
    if r.failed:
        print(f"foliolab: {len(r.failed)} point(s) failed (the others are stored; a rerun runs only those)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
