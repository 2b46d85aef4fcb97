"""Command line entry point ``graphwm``."""

from __future__ import annotations

import argparse
from pathlib import Path


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphwm", description="Graph world models: envs, GDM and the GDD metric."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="random-policy episodes of every env, with renders")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory")
    demo.add_argument("--seeds", type=int, default=3, help="episodes per env")
    demo.add_argument("--num-nodes", type=int, default=20, help="graph size N")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``graphwm`` CLI."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        from graphwm.demo import run_demo

        run_demo(args.out, seeds=args.seeds, num_nodes=args.num_nodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
