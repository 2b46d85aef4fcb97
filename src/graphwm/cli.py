"""Command line entry point ``graphwm``.

Subcommands: ``demo``, ``collect``, ``fit``, ``train``, ``evaluate``, ``curve``,
``downstream``, ``report``, ``reproduce``, ``search`` and ``noise``. Every stage takes
``--preset`` (a name or a TOML file) and ``--out`` (the run directory); rerunning a stage
skips finished jobs.

Errors print as one line, ``graphwm: error: ...``; exit code 2 for a problem with the input
(a bad preset value, a corrupt or missing file, a malformed result), 1 for anything else.
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from graphwm.checks import CheckedPreset


def _count(minimum: int):
    """An argparse type: an integer >= ``minimum`` (else a usage error, exit code 2)."""

    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {value}")
        return value

    return read


def _demo_size(text: str) -> int:
    """An argparse type: a graph size every env of the demo accepts (the smallest
    ``max_nodes`` of the four; RGC's is the smallest)."""
    value = _count(5)(text)
    from graphwm.envs import ENV_IDS, env_limits

    limits = {name: env_limits(name) for name in ENV_IDS}
    low = max(lo for lo, _ in limits.values())
    high = min(hi for _, hi in limits.values())
    if not low <= value <= high:
        which = min(limits, key=lambda name: limits[name][1])
        raise argparse.ArgumentTypeError(
            f"must be in [{low}, {high}] (every env of the demo runs it; {which} takes at most "
            f"{high} nodes), got {value}"
        )
    return value


def _directory(text: str) -> Path:
    """An argparse type: a non-empty path (``""`` would mean the current directory) that is a
    directory or does not exist yet (a file there, ``/dev/null`` included, is refused)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a non-empty path")
    path = Path(text)
    _check_path_lengths(path)
    try:
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{text!r} exists and is not a directory: name a run directory (new or existing)"
            )
    except OSError as err:  # e.g. a component the file system cannot name
        raise argparse.ArgumentTypeError(f"{text!r} cannot be used as a directory: {err}") from None
    return path


#: the longest file name and path most file systems accept (bytes; POSIX NAME_MAX, PATH_MAX);
#: the run store adds its own names below the directory, so leave room for them
NAME_MAX, PATH_MAX, STORE_ROOM = 255, 4096, 200


def _check_path_lengths(path: Path) -> None:
    """Refuse a path the file system would refuse later (after hours of work), naming the
    part: a component over NAME_MAX bytes, or a whole path that leaves the run store less
    than STORE_ROOM bytes of PATH_MAX."""
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise argparse.ArgumentTypeError(
                f"the path component {part[:40]!r}... is {len(os.fsencode(part))} bytes long; "
                f"file systems accept at most {NAME_MAX}"
            )
    full = len(os.fsencode(str(path.absolute())))
    if full > PATH_MAX - STORE_ROOM:
        raise argparse.ArgumentTypeError(
            f"the path is {full} bytes long; the run store needs it under "
            f"{PATH_MAX - STORE_ROOM} (PATH_MAX {PATH_MAX} less room for its own file names)"
        )


def _preset_name(text: str) -> str:
    """An argparse type: a non-empty preset name or TOML path."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "must name a preset (smoke, medium, long, paper, tiny) or a .toml file, got ''"
        )
    return text


def _add_run_args(p: argparse.ArgumentParser, default_out: str = "runs/smoke") -> None:
    p.add_argument(
        "--preset", type=_preset_name, default="smoke", help="preset name (smoke) or TOML path"
    )
    p.add_argument("--out", type=_directory, default=Path(default_out), help="run directory")
    p.add_argument("--executor", choices=["local", "ray"], help="override the preset's executor")
    p.add_argument("--device", help="override the preset's device (cpu, cuda)")
    p.add_argument(
        "--precision", choices=["fp32", "bf16"], help="override the preset's train.precision"
    )
    p.add_argument(
        "--redo-corrupt",
        action="store_true",
        help="quarantine corrupt store files (to RUN_DIR/quarantine/) and recompute them",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again the jobs an earlier run recorded as failed (by default they are "
        "reported failed again without running)",
    )
    p.add_argument(
        "--tensorboard",
        action="store_true",
        default=None,
        help="also write TensorBoard event files of the training jobs (train.tensorboard)",
    )
    p.add_argument("--workers", type=_count(0), help="local worker processes (0: one per core)")
    p.add_argument(
        "--envs",
        nargs="+",
        help="restrict to these envs (RGC OD SAR CF, or a Gymnasium id of the preset)",
    )
    p.add_argument("--models", nargs="+", help="restrict to these models")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphwm", description="Graph world models: envs, GDM and the GDD metric."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="random-policy episodes of every env, with renders")
    demo.add_argument("--out", type=_directory, default=Path("runs/demo"), help="output directory")
    demo.add_argument("--seeds", type=_count(1), default=3, help="episodes per env")
    demo.add_argument(
        "--num-nodes", type=_demo_size, default=20, help="graph size N (every env must take it)"
    )
    demo.add_argument("--gif", action="store_true", help="also write an animation per episode")
    for name, help_text in (
        ("reproduce", "run every stage of a preset and print the result tables"),
        ("collect", "stage 1: random-policy rollouts"),
        ("fit", "stage 2: bandwidths and feature scaling"),
        ("train", "stage 3: train every model x env x seed"),
        ("evaluate", "stages 4-7: self-GDD, single-step, ablations, multi-step GDD"),
        ("curve", "GDD over training: the checkpoints kept every train.eval_every steps"),
        ("downstream", "stage 8: MaskablePPO in each model's dream env vs the real env"),
        ("search", "hyperparameter grid search selected by mean validation GDD"),
    ):
        _add_run_args(sub.add_parser(name, help=help_text))
    noise = sub.add_parser(
        "noise", help="evaluation noise: evaluate each checkpoint R times, report the spread"
    )
    _add_run_args(noise)
    noise.add_argument(
        "--repeats", type=_count(2), default=5, help="evaluations of each checkpoint (R >= 2)"
    )
    noise.add_argument(
        "--of", choices=["final", "curve"], default="final",
        help="the final single-step evaluations or the GDD curve's points",
    )  # fmt: skip
    noise.add_argument("--steps", type=_count(1), nargs="+", help="curve steps only (--of curve)")
    noise.add_argument(
        "--episodes", type=_count(1), help="test episodes per evaluation (the first ones)"
    )
    noise.add_argument(
        "--env-samples", action="store_true",
        help="also redraw the env samples of each reference transition (default: model only)",
    )  # fmt: skip
    cost = sub.add_parser(
        "estimate-cost", help="measure per-job times here and estimate a preset's device-hours"
    )
    cost.add_argument(
        "--preset", type=_preset_name, default="paper", help="preset name or TOML path"
    )
    cost.add_argument("--device", default="cpu", help="device to measure on (cpu, cuda)")
    cost.add_argument("--steps", type=_count(1), default=5, help="timed training steps per model")
    cost.add_argument("--envs", nargs="+", help="restrict to these envs")
    cost.add_argument("--models", nargs="+", help="restrict to these models")
    report = sub.add_parser("report", help="rebuild tables and figures from stored results")
    report.add_argument("run_dir", type=Path, help="run directory")
    report.add_argument(
        "--average-last", type=_count(1), default=0, metavar="N",
        help="add a table of the GDD curve averaged over each model's last N checkpoints "
        "(off by default: the paper reports the final model)",
    )  # fmt: skip
    for command in sub.choices.values():  # --debug also after the subcommand
        command.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
        )
    return parser


def _in_file(name: str, read: Callable[[], CheckedPreset]) -> CheckedPreset:
    """``read()``, a bad value's error naming the preset file first."""
    from graphwm.config import PRESET_NAMES, PRESETS_DIR, PresetError

    try:
        return read()
    except PresetError as err:
        file = PRESETS_DIR / f"{name}.toml" if name in PRESET_NAMES else Path(name)
        raise PresetError(f"{file}: {err}") from None


def _ablations_of(ablations: list, models: list[str]) -> list:
    """The ablations ``--models`` keeps: those named, and those of a named base model
    (``gdm:no-edge`` with ``gdm``); a model left out takes its ablations with it."""
    return [a for a in ablations if a in models or str(a).split(":", 1)[0] in models]


def _narrowed(raw: dict, envs: list[str] | None, models: list[str] | None) -> dict:
    """The ``ablations``, ``ablation_envs`` and ``env_labels`` of the preset file ``raw`` that
    ``--models`` and ``--envs`` leave (an ablation of a model left out, an ablation env or a
    label of an env left out, go with it)."""
    if not envs and not models:
        return {}
    out: dict = {}
    ablations, ablation_envs = raw.get("ablations", []), raw.get("ablation_envs")
    # a value of another type is left for the preset check to word
    if models and isinstance(ablations, list):
        out["ablations"] = _ablations_of(ablations, models)
    if envs and isinstance(ablation_envs, list):
        out["ablation_envs"] = [e for e in ablation_envs if e in envs]
    labels = raw.get("env_labels")
    if envs and isinstance(labels, dict):  # the labels of the envs left
        out["env_labels"] = {e: label for e, label in labels.items() if e in envs}
    return out


def _preset(args: argparse.Namespace) -> CheckedPreset:
    """The command's preset: its file read once, parsed and checked once."""
    from graphwm.checks import parse_checked
    from graphwm.config import read_preset

    raw = read_preset(args.preset)
    overrides = {
        **_narrowed(raw, args.envs, args.models),
        "executor": args.executor,
        "device": args.device,
        "workers": args.workers,
        "envs": args.envs,
        "models": args.models,
        "train.precision": args.precision,
        "train.tensorboard": args.tensorboard,
    }
    return _in_file(args.preset, lambda: parse_checked(raw, overrides))


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean a problem with the user's input (exit code 2)."""
    from gdm_models.training.checkpoint import CheckpointError

    from graphwm.config import PresetError
    from graphwm.store.files import CorruptFileError
    from graphwm.store.records import ResultsFormatError

    return (
        PresetError,
        CorruptFileError,
        CheckpointError,
        ResultsFormatError,
        FileNotFoundError,
        NotADirectoryError,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the ``graphwm`` CLI; returns the exit code (errors: one line on stderr).

    SIGINT and SIGTERM stop the run's workers and return 130 / 143 (``128 + signal``) after
    saying on stderr which jobs were stopped and how to resume.
    """
    from graphwm.store.interrupts import raise_on_signals

    _quiet_resource_tracker()
    with raise_on_signals():
        try:
            return _main(argv)
        except KeyboardInterrupt as err:
            return _interrupted(err, sys.argv[1:] if argv is None else argv)


#: the warning multiprocessing's resource tracker prints at exit for the queue semaphores of
#: pool workers a signal ended (it cleans them up itself): noise after a clean stop
_TRACKER_WARNING = "ignore::UserWarning:multiprocessing.resource_tracker"


def _quiet_resource_tracker() -> None:
    """Pass the filter of :data:`_TRACKER_WARNING` to the resource tracker process, which
    takes its warning options from this interpreter's (``sys.warnoptions``) when it starts."""
    if _TRACKER_WARNING not in sys.warnoptions:
        sys.warnoptions.append(_TRACKER_WARNING)


def _interrupted(err: KeyboardInterrupt, argv: list[str]) -> int:
    """Report a run stopped by a signal; return the exit code ``128 + signal``."""
    import shlex

    from graphwm.store.interrupts import Interrupted

    stop = Interrupted.of(err)
    lines = [f"graphwm: interrupted by {stop.signal_name}"]
    if stop.jobs:
        lines[0] += f"; stopped {len(stop.jobs)} unfinished job(s) (running or queued):"
        lines += [f"  {job}" for job in stop.jobs]
    lines.append(
        "graphwm: every finished job's record is stored (records are written whole, never in "
        "part); to resume, rerun the same command (it skips finished jobs and training "
        "continues from its last checkpoint):"
    )
    lines.append("  " + shlex.join(["graphwm", *argv]))
    print("\n".join(lines), file=sys.stderr, flush=True)
    return stop.exit_code


def _main(argv: list[str] | None) -> int:
    args = _build_parser().parse_args(argv)
    if not logging.getLogger("graphwm").handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("graphwm: %(levelname)s: %(message)s"))
        logging.getLogger("graphwm").addHandler(handler)
        logging.getLogger("graphwm").setLevel(logging.INFO)
    from graphwm.store.outcomes import JobsFailed

    try:
        if args.debug:
            return _run(args)
        try:
            return _run(args)
        except JobsFailed:
            raise
        except Exception as err:  # one clear line; --debug for the traceback
            return _error_line(args, err, sys.argv[1:] if argv is None else argv)
    except JobsFailed as err:
        return _jobs_failed(err, sys.argv[1:] if argv is None else argv)


def _jobs_failed(err, argv: list[str]) -> int:
    """Report failed jobs (every other job ran): each with its cause, where its output is,
    and the commands that resume; exit code 1."""
    import shlex

    report = getattr(err, "report", None)
    if report is not None:
        _print_report(report)
    lines = [f"graphwm: error: {len(err.failures)} job(s) failed; every other job ran:"]
    for desc, _job, failure in err.failures:
        lines.append(f"  {desc}: {failure.cause}")
    lines.append(
        "graphwm: each job's output and traceback: RUN_DIR/jobs/<key>.log; the report "
        "computes intervals over the seeds that finished and names the missing ones"
    )
    base = [a for a in argv if a != "--retry-failed"]
    retryable = [f for _, _, f in err.failures if not f.deterministic]
    if retryable:
        lines.append("graphwm: to resume (reruns the failed jobs; finished jobs are kept):")
        lines.append("  " + shlex.join(["graphwm", *base]))
    if len(retryable) < len(err.failures):
        lines.append(
            "graphwm: a job that failed by itself is not rerun (it would fail again); to run "
            "it again, e.g. after changing its settings or the code:"
        )
        lines.append("  " + shlex.join(["graphwm", *base, "--retry-failed"]))
    print("\n".join(lines), file=sys.stderr, flush=True)
    return 1


def _error_line(args: argparse.Namespace, err: Exception, argv: list[str]) -> int:
    """Print one line for ``err`` (and, for a stage command stopped by something other than
    its input, the command that resumes); the exit code (2 for a problem with the input)."""
    import shlex

    user = isinstance(err, _user_errors())
    message = str(err) if user else f"{type(err).__name__}: {err}"
    from graphwm.store.files import CorruptFileError

    if isinstance(err, CorruptFileError) and args.command == "report":
        message = err.for_reader()  # report has no --redo-corrupt
    first = message.strip().splitlines()[0] if message.strip() else type(err).__name__
    hint = "" if user else " (run with --debug for the traceback)"
    print(f"graphwm: error: {first}{hint}", file=sys.stderr)
    if not user and hasattr(args, "retry_failed"):  # a stage command: finished jobs are kept
        print(
            "graphwm: finished jobs are stored; to resume, rerun: "
            + shlex.join(["graphwm", *argv]),
            file=sys.stderr,
        )
    return 2 if user else 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from graphwm.demo import run_demo

        run_demo(args.out, seeds=args.seeds, num_nodes=args.num_nodes, gif=args.gif)
        return 0
    if args.command == "report":
        from graphwm.report.build import build_report

        paths = build_report(args.run_dir, average_last=args.average_last)
        _print_report(paths)
        return 0

    if args.command == "estimate-cost":
        # measured on --device: the preset's own device need not exist here
        from graphwm.checks import check_device, parse_checked
        from graphwm.config import read_preset
        from graphwm.cost import estimate, format_estimate

        raw = read_preset(args.preset)
        overrides = {"envs": args.envs, "models": args.models, "device": args.device}
        overrides.update(_narrowed(raw, args.envs, args.models))
        preset = _in_file(args.preset, lambda: parse_checked(raw, overrides))
        check_device(args.device, "--device")
        print(format_estimate(estimate(preset, args.device, args.steps), args.device))
        return 0

    from graphwm import pipeline

    preset = _preset(args)  # validated here, once, before any work (the pipeline's entry
    # point checks the machine's device and passes the checked preset down as it is)
    _check_something_to_do(args.command, preset)
    run = pipeline.RunPaths(
        args.out, redo_corrupt=args.redo_corrupt, retry_failed=args.retry_failed
    )
    progress = not args.quiet
    if args.command == "reproduce":
        _print_report(
            pipeline.reproduce_report(
                preset,
                args.out,
                progress=progress,
                redo_corrupt=args.redo_corrupt,
                retry_failed=args.retry_failed,
            )
        )
    elif args.command == "collect":
        pipeline.stage_collect(preset, run, progress)
    elif args.command == "fit":
        pipeline.stage_collect(preset, run, progress)
        pipeline.stage_fit(preset, run)
    elif args.command == "train":
        pipeline.stage_train(preset, run, progress)
    elif args.command == "evaluate":
        pipeline.stage_evaluate(preset, run, progress)  # trains what is not trained yet
    elif args.command == "curve":
        if not preset.train.eval_every:
            print("graphwm: train.eval_every is 0: no checkpoints kept, no GDD curve",
                  file=sys.stderr)  # fmt: skip
        pipeline.stage_curve(preset, run, progress)  # trains what is not trained yet
    elif args.command == "downstream":
        pipeline.stage_downstream(preset, run, progress)  # trains what is not trained yet
    elif args.command == "noise":
        from graphwm.noise import run_noise

        result = run_noise(
            preset, run, args.repeats, args.of, env_samples=args.env_samples,
            steps=args.steps, episodes=args.episodes, progress=progress,
        )  # fmt: skip
        print(result.table)
        print(f"written: {result.table_path} and {result.json_path}")
    elif args.command == "search":
        from graphwm.search import run_search

        best = run_search(preset, run, progress=progress)
        for key, value in best.items():
            print(f"{key}: {value}")
    return 0


def _check_something_to_do(command: str, preset) -> None:
    """Refuse, before any work, a stage command whose preset section is missing (it would do
    nothing, or fail after the earlier stages ran): a ``PresetError``, exit code 2."""
    from graphwm.config import PresetError

    needs = {"search": ("search", "[search.grid.<model>] tables"),
             "downstream": ("downstream", "a [downstream] section (docs/dream.md)")}  # fmt: skip
    if command in needs:
        field, what = needs[command]
        if getattr(preset, field, None) is None or (command == "search" and not preset.search.grid):
            raise PresetError(
                f"nothing to do: `graphwm {command}` needs {what} in the preset, and this "
                "preset has none"
            )


def _print_report(paths) -> None:
    print(paths.summary())


def run() -> NoReturn:
    """The ``graphwm`` command (and ``python -m graphwm.cli``): :func:`main`, then
    :func:`exit_now` with its code. An exception :func:`main` lets through (``--debug``)
    leaves the interpreter the usual way."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process as the interpreter does, less its teardown: wait for the threads
    (``threading._shutdown``: the non-daemon threads and the worker pools' exit hooks), run
    the ``atexit`` handlers, flush stdout and stderr, then ``os._exit(code)``. Freeing the
    ~2,900 modules a run imports (torch, matplotlib, ...) writes nothing and took 1.1 s of
    every command on this project's 2-core CPU (docs/notes/backends-and-pool.md)."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:  # CPython's own first step at exit
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or a broken pipe
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
