"""Command line entry point ``graphwm``.

Subcommands: ``demo``, ``collect``, ``fit``, ``train``, ``evaluate``, ``report``, ``reproduce``
and ``search``. Every stage takes ``--preset`` (a name or a TOML file) and ``--out`` (the run
directory); rerunning a stage skips finished jobs.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _add_run_args(p: argparse.ArgumentParser, default_out: str = "runs/smoke") -> None:
    p.add_argument("--preset", default="smoke", help="preset name (smoke, paper) or TOML path")
    p.add_argument("--out", type=Path, default=Path(default_out), help="run directory")
    p.add_argument("--executor", choices=["local", "ray"], help="override the preset's executor")
    p.add_argument("--device", help="override the preset's device (cpu, cuda)")
    p.add_argument("--workers", type=int, help="local worker processes (0: one per core)")
    p.add_argument("--envs", nargs="+", help="restrict to these envs (RGC OD SAR CF)")
    p.add_argument("--models", nargs="+", help="restrict to these models")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphwm", description="Graph world models: envs, GDM and the GDD metric."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="random-policy episodes of every env, with renders")
    demo.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory")
    demo.add_argument("--seeds", type=int, default=3, help="episodes per env")
    demo.add_argument("--num-nodes", type=int, default=20, help="graph size N")
    for name, help_text in (
        ("reproduce", "run every stage of a preset and print the result tables"),
        ("collect", "stage 1: random-policy rollouts"),
        ("fit", "stage 2: bandwidths and feature scaling"),
        ("train", "stage 3: train every model x env x seed"),
        ("evaluate", "stages 4-7: self-GDD, single-step, ablations, multi-step GDD"),
        ("search", "hyperparameter grid search selected by mean validation GDD"),
    ):
        _add_run_args(sub.add_parser(name, help=help_text))
    cost = sub.add_parser(
        "estimate-cost", help="measure per-job times here and estimate a preset's device-hours"
    )
    cost.add_argument("--preset", default="paper", help="preset name or TOML path")
    cost.add_argument("--device", default="cpu", help="device to measure on (cpu, cuda)")
    cost.add_argument("--steps", type=int, default=5, help="timed training steps per model")
    cost.add_argument("--envs", nargs="+", help="restrict to these envs")
    cost.add_argument("--models", nargs="+", help="restrict to these models")
    report = sub.add_parser("report", help="rebuild tables and figures from stored results")
    report.add_argument("run_dir", type=Path, help="run directory")
    return parser


def _preset(args: argparse.Namespace) -> dict:
    from graphwm.pipeline import load_preset

    return load_preset(
        args.preset,
        {
            "executor": args.executor,
            "device": args.device,
            "workers": args.workers,
            "envs": args.envs,
            "models": args.models,
        },
    )


def main(argv: list[str] | None = None) -> int:
    """Run the ``graphwm`` CLI."""
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        from graphwm.demo import run_demo

        run_demo(args.out, seeds=args.seeds, num_nodes=args.num_nodes)
        return 0
    if args.command == "report":
        from graphwm.report import build_report

        paths = build_report(args.run_dir)
        _print_report(paths)
        return 0

    if args.command == "estimate-cost":
        from graphwm.cost import estimate, format_estimate
        from graphwm.pipeline import load_preset

        preset = load_preset(args.preset, {"envs": args.envs, "models": args.models})
        if args.models:
            preset["ablations"] = [a for a in preset.get("ablations", []) if a in args.models]
        print(format_estimate(estimate(preset, args.device, args.steps), args.device))
        return 0

    from graphwm import pipeline

    preset = _preset(args)
    run = pipeline.RunPaths(args.out)
    progress = not args.quiet
    if args.command == "reproduce":
        pipeline.reproduce(preset, args.out, progress=progress)
        from graphwm.report import build_report

        _print_report(build_report(args.out))
    elif args.command == "collect":
        pipeline.stage_collect(preset, run, progress)
    elif args.command == "fit":
        pipeline.stage_fit(preset, run)
    elif args.command == "train":
        pipeline.stage_train(preset, run, progress)
    elif args.command == "evaluate":
        trained = pipeline.stage_train(preset, run, progress)  # finished jobs are skipped
        pipeline.stage_evaluate(preset, run, trained, progress)
    elif args.command == "search":
        from graphwm.search import run_search

        best = run_search(preset, run, progress=progress)
        for key, value in best.items():
            print(f"{key}: {value}")
    return 0


def _print_report(paths) -> None:
    print(paths.main_table or "(no single-step results yet)")
    print(f"\nall tables and figures: {paths.index}")


if __name__ == "__main__":
    raise SystemExit(main())
