"""Open a finished run from Python: what it holds, its trained models, fitted bandwidths, test
episodes and metric schema, and the GDD of a model on one test transition (docs/metric.md,
"Scoring a run's model").

>>> run = graphwm.open_run("runs/tiny")                      # doctest: +SKIP
>>> print(run)                                               # doctest: +SKIP
>>> model = run.load_model("SAR", "gdm", seed=0)             # doctest: +SKIP
>>> run.score(model, "SAR", size=7, episode=0, t=0).gdd     # doctest: +SKIP

Everything is read through the store's own layout and readers (:mod:`graphwm.store`,
:mod:`graphwm.stages`), and a transition is scored by the evaluation's own code
(:class:`~graphwm.stages.evaluate.ModelSampler`, :class:`~graphwm.metric.protocol.EvalContext`),
so with the evaluation's sample count and the default seed a score equals the stored one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphwm.envs import env_schema
from graphwm.metric.graph import extend_schema, stack_graphs
from graphwm.metric.protocol import STREAM_ENV, EvalContext, ReplayedEpisode, sample_seeds
from graphwm.stages.collect import load_episodes
from graphwm.stages.evaluate import ModelSampler, ReferencePoint
from graphwm.stages.fit import load_fitted
from graphwm.store.files import inside, read_json
from graphwm.store.paths import RunPaths, listed_files, safe_name
from graphwm.store.records import Record, ResultsFormatError, read_record

_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class TrainedModel:
    """One trained model of a run (a ``run.json`` ``train`` entry).

    Attributes:
        env, model, seed: what was trained (``model`` as the preset names it, e.g.
            ``"gdm:no-h-plus"``).
        dir: its folder, relative to the run directory.
        steps: the training steps whose checkpoints it kept besides the final one
            (``train.eval_every``), ascending.
    """

    env: str
    model: str
    seed: int
    dir: str
    steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class TestFile:
    """One collected test file: ``episodes`` random-policy episodes of ``env`` at ``size``
    nodes (stored as seeds and actions, replayed on reading)."""

    env: str
    size: int
    episodes: int
    path: str


class Run:
    """A run directory opened for reading (:func:`open_run`); nothing is written.

    Attributes:
        root: the run directory.
        preset: the name of the preset that last ran in it.
        models: the trained models, in ``run.json``'s order.
        test_files: the collected test files.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        record = RunPaths(self.root).run_record
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root} is not a run directory (no such folder)")
        if not record.exists():
            raise FileNotFoundError(
                f"{self.root} holds no run.json: not a finished run (graphwm reproduce writes it)"
            )
        raw = read_json(record)
        if not isinstance(raw, dict) or not isinstance(raw.get("train", []), list):
            raise ResultsFormatError(f"{record}: not a run record (a JSON object with 'train')")
        self.preset: str = str(raw.get("preset", ""))
        self.models: list[TrainedModel] = [self._trained(entry, record) for entry in raw["train"]]
        self.test_files: list[TestFile] = self._test_files()
        self._results: list[tuple[Record, dict[str, Any]]] | None = None

    def _trained(self, entry: Any, record: Path) -> TrainedModel:
        if not isinstance(entry, dict) or not {"env", "model", "seed", "dir"} <= set(entry):
            raise ResultsFormatError(f"{record}: a 'train' entry lacks env/model/seed/dir: {entry}")
        folder = inside(self.root, entry["dir"], record) / "ckpt"
        kept = sorted(
            int(m.group(1))
            for p in (folder.iterdir() if folder.is_dir() else ())
            if (m := _STEP_DIR.match(p.name))
        )
        return TrainedModel(
            str(entry["env"]), str(entry["model"]), int(entry["seed"]), entry["dir"], tuple(kept)
        )

    def _test_files(self) -> list[TestFile]:
        out = []
        # rglob: an env id with a "/" (an own env's "mypkg/MyEnv-v0") makes a subfolder
        for sidecar in sorted((self.root / "data").rglob("test_n*.json")):
            raw = read_json(sidecar)
            out.append(
                TestFile(raw["env"], int(raw["num_nodes"]), int(raw["episodes"]), raw["file"])
            )
        return out

    # -- what the run holds -------------------------------------------------------------

    @property
    def envs(self) -> list[str]:
        """The envs with a trained model or test data, sorted."""
        return sorted({m.env for m in self.models} | {f.env for f in self.test_files})

    def _read_results(self) -> list[tuple[Record, dict[str, Any]]]:
        if self._results is None:
            files = listed_files(self.root, "results", "result file", self.root / "results")
            self._results = []
            for path in files:
                job = read_json(path).get("job")  # the keys of its fit, data and training job
                self._results.append((read_record(path), job if isinstance(job, dict) else {}))
        return self._results

    @property
    def results(self) -> list[Record]:
        """The evaluation records of the last preset run (``run.json``'s ``results``)."""
        return [record for record, _ in self._read_results()]

    def __str__(self) -> str:
        lines = [f"run {self.root} (preset {self.preset or '?'})"]
        for env in self.envs:
            sizes = sorted({f.size for f in self.test_files if f.env == env})
            lines.append(f"  {env}: test sizes {sizes}")
            for m in (m for m in self.models if m.env == env):
                kept = f", kept steps {list(m.steps)}" if m.steps else ""
                lines.append(f"    {m.model} seed {m.seed}{kept}")
        lines.append(f"  {len(self.results)} evaluation records")
        return "\n".join(lines)

    # -- loading --------------------------------------------------------------------------

    def trained(self, env: str, model: str, seed: int = 0) -> TrainedModel:
        """The run's entry of ``model`` on ``env`` with ``seed`` (``KeyError`` naming what the
        run holds otherwise)."""
        for m in self.models:
            if (m.env, m.model, m.seed) == (env, model, seed):
                return m
        held = sorted({(m.env, m.model, m.seed) for m in self.models})
        raise KeyError(f"{self.root} holds no model {model!r} on {env!r} with seed {seed}; {held}")

    def checkpoint(self, env: str, model: str, seed: int = 0, step: int | None = None) -> Path:
        """The checkpoint folder of a trained model: the final one, or the one kept at
        ``step``."""
        entry = self.trained(env, model, seed)
        folder = self.root / entry.dir / "ckpt"
        if step is None:
            return folder / "final"
        if step not in entry.steps:
            raise ValueError(
                f"{entry.dir} keeps no checkpoint of step {step}; it keeps {list(entry.steps)} "
                "and the final one (step=None)"
            )
        return folder / f"step_{step:06d}"

    def load_model(
        self, env: str, model: str, seed: int = 0, step: int | None = None, device: str = "cpu"
    ):
        """The trained world model (a ``gdm_models`` model, in eval mode) of ``model`` on
        ``env`` with ``seed``, final or at a kept ``step``."""
        from gdm_models import load_checkpoint

        path = self.checkpoint(env, model, seed, step)
        loaded = load_checkpoint(path, model_name=model, device=device)
        loaded.eval()
        return loaded

    def _fit_dir(self, env: str) -> Path:
        """The fit folder of ``env``: the one the run's evaluations used, else the only one."""
        keys = {job.get("fit") for _, job in self._read_results() if job.get("env") == env}
        top = self.root / "fit" / safe_name(env)
        if not top.is_dir() and (self.root / "fit" / env).is_dir():
            top = self.root / "fit" / env  # a run written under the old folder names
        folders = sorted(p for p in top.glob("*") if p.is_dir())
        used = [p for p in folders if f"fit-{p.name}" in keys]
        chosen = used or folders
        if len(chosen) != 1:
            found = [p.relative_to(self.root).as_posix() for p in chosen]
            raise ValueError(f"{self.root}: expected one fit of {env!r}, found {found or 'none'}")
        return chosen[0]

    def bandwidths(self, env: str):
        """The GDD bandwidths fitted on ``env``'s training data (``gdd_metric.Bandwidths``)."""
        return load_fitted(self._fit_dir(env))[0]

    def metric_schema(self, env: str) -> dict[str, Any]:
        """The schema the GDD scores ``env`` on: the env's schema extended with ``reward``,
        ``continuation`` and ``action_mask`` (:func:`graphwm.metric.graph.extend_schema`)."""
        # the env's own schema, as the evaluation reads it: the fit's schema.json is stored
        # with sorted keys, which loses the feature order the observation columns follow
        return extend_schema(env_schema(env))

    def test_file(self, env: str, size: int | None = None) -> TestFile:
        """The test file of ``env`` at ``size`` nodes (``None``: the run's only size)."""
        files = [f for f in self.test_files if f.env == env and size in (None, f.size)]
        if len(files) != 1:
            sizes = sorted(f.size for f in self.test_files if f.env == env)
            raise ValueError(
                f"{self.root} has test sizes {sizes} for {env!r}; pass size= one of them"
                if files or sizes
                else f"{self.root} holds no test data of {env!r}"
            )
        return files[0]

    def test_episodes(
        self, env: str, size: int | None = None, steps: tuple[int, ...] = ()
    ) -> list[ReplayedEpisode]:
        """The test episodes of ``env`` at ``size``, replayed from their seeds and actions
        (observations, actions, node selections, rewards, termination flags; env snapshots
        before the ``steps`` given)."""
        test = self.test_file(env, size)
        ctx = EvalContext.build(env, test.size, None)
        episodes, seeds = load_episodes(self.root / test.path)
        return [
            ctx.replay(int(seed), ep["actions"], list(steps), keep_observations=True, check=ep)
            for ep, seed in zip(episodes, seeds, strict=True)
        ]

    # -- scoring --------------------------------------------------------------------------

    def score(
        self,
        model: Any,
        env: str,
        size: int | None = None,
        episode: int = 0,
        t: int = 0,
        num_samples: int = 16,
        seed: int = 0,
    ):
        """The single-step GDD of ``model`` on transition ``t`` of test episode ``episode``:
        ``num_samples`` env samples (the state restored, the reference action stepped with
        fresh seeds) against ``num_samples`` of the model's predictions, on the fitted
        bandwidths. Returns ``gdd_metric``'s result (``.gdd`` and the node, graph, edge and
        joint components); a terminated transition is scored on reward and continuation.

        The evaluation's own sampler and seeds: ``seed=0`` and the preset's
        ``evaluate.num_samples`` reproduce the run's stored per-transition GDD (at the
        evaluation's reference transitions); ``seed=k > 0`` redraws both sample sets
        independently (the evaluation-noise repeats' seeds, :mod:`graphwm.noise`).
        """
        test = self.test_file(env, size)
        ctx = EvalContext.build(env, test.size, self.bandwidths(env))
        episodes, seeds = load_episodes(self.root / test.path)
        if not 0 <= episode < len(episodes):
            raise IndexError(f"episode {episode} out of range: {test.path} holds {len(episodes)}")
        ep, ep_seed = episodes[episode], int(seeds[episode])
        length = len(ep["reward"])
        if not 0 <= t < length:
            raise IndexError(f"t = {t} out of range: episode {episode} has {length} transitions")
        replay = ctx.replay(ep_seed, ep["actions"], [t], keep_observations=True, check=ep)
        graphs, invalid = ctx.samples(
            replay.snapshots[t],
            ep["actions"][t : t + 1],
            sample_seeds(ep_seed, t, STREAM_ENV, num_samples, seed),
        )
        point = ReferencePoint(
            episode,
            ep_seed,
            t,
            replay,
            [stack_graphs(graphs[0])],
            invalid,
            [bool(ep["terminated"][t])],
        )
        model_set = ModelSampler(model, num_samples, seed, batch=False)(point)[0]
        return ctx.gdd(model_set, point.env_sets[0], point.terminal[0])


def open_run(run_dir: str | Path) -> Run:
    """Open the run directory ``run_dir`` (``graphwm reproduce --out``) for reading.

    Raises:
        FileNotFoundError: no such folder, or no ``run.json`` in it.
        ResultsFormatError: ``run.json`` is not a run record.
    """
    return Run(run_dir)


__all__ = ["Run", "TestFile", "TrainedModel", "open_run"]
