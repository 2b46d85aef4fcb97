"""The downstream stage of the pipeline: jobs, their store, and the report's table and figure.

``graphwm downstream`` (and ``reproduce`` when the preset has a ``[downstream]`` section) runs,
for every env of the section, a MaskablePPO agent (the section's ``policy``, graph by default)
on ``dream_envs`` parallel episodes of the dream env of every trained model (ablations
included), the same agent and budget on as many real envs, and the yardsticks
(:mod:`graphwm.downstream`). Each job is keyed by its content (the world model's training job
key, the policy and the env count included), its record is stored as
``RUN_DIR/downstream/<key>.json``, and ``graphwm report`` rebuilds ``report/downstream.md`` and
``report/downstream.png`` from these records and the run's single- and multi-step GDD results.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphwm.downstream.config import DownstreamConfig
from graphwm.downstream.gdd import attach_gdd, gdd_maps
from graphwm.downstream.record import DownstreamRecord
from graphwm.downstream.report import downstream_figure, downstream_table
from graphwm.downstream.runs import run_agent_job
from graphwm.store.files import content_key, read_json
from graphwm.store.paths import listed_files
from graphwm.store.records import check_digest

STORE_DIR = "downstream"
TABLE_NAME = "downstream"
FIGURE_NAME = "downstream"


#: config keys that do not change a record: paths, thread counts, the TensorBoard switch
_NOT_KEYED = ("checkpoint", "threads", "tensorboard")


@dataclass(frozen=True)
class DownstreamJob:
    """One downstream agent as a pipeline job (see :func:`graphwm.downstream.runs.run_agent_job`).

    ``config`` holds the job config as sorted ``(key, value)`` pairs with the checkpoint path
    relative to the run directory; ``train_key`` is the key of the world model's training job
    (dream agents), which the job's key hashes instead of the path.
    """

    config: tuple[tuple[str, Any], ...]
    train_key: str | None = None

    kind = "downstream"

    @property
    def env(self) -> str:
        return str(dict(self.config)["env"])

    @property
    def model(self) -> str | None:
        return dict(self.config).get("model")

    def describe(self) -> dict[str, Any]:
        """What determines the record: the config without paths and thread counts."""
        out = {k: _plain(v) for k, v in self.config if k not in _NOT_KEYED}
        if self.train_key is not None:
            out["train"] = self.train_key
        return out

    @property
    def key(self) -> str:
        return content_key("downstream", self.describe())

    def job_config(self, run_dir: Path) -> dict[str, Any]:
        """The config of :func:`run_agent_job`, the checkpoint resolved under ``run_dir``;
        with ``tensorboard`` set, the agent's event files go to
        ``RUN_DIR/downstream/tensorboard/<job key>/``."""
        config = {k: _plain(v) for k, v in self.config}
        if "checkpoint" in config:
            config["checkpoint"] = str(Path(run_dir) / config["checkpoint"])
        if config.pop("tensorboard", False):
            config["tensorboard_dir"] = str(Path(run_dir) / STORE_DIR / "tensorboard" / self.key)
        return config


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return {k: _plain(v) for k, v in value}
    return value


def downstream_jobs(
    section: DownstreamConfig,
    envs: Sequence[str],
    trained: Iterable[Any],
    *,
    threads: int = 1,
    device: str = "cpu",
    tensorboard: bool = False,
) -> list[DownstreamJob]:
    """The jobs of the ``[downstream]`` section for the preset's training jobs ``trained``
    (objects with ``env``, ``model``, ``seed``, ``key`` and ``reldir``); ``tensorboard``: the
    trained agents also write TensorBoard event files (not keyed)."""
    trained = list(trained)
    jobs = []
    for env in section.envs or envs:
        runs = [t for t in trained if t.env == env]
        by_model_seed = {(t.model, int(t.seed)): t for t in runs}
        triples = [(t.model, int(t.seed), f"{t.reldir}/ckpt/final") for t in runs]
        for config in section.job_configs(env, triples, threads=threads, device=device):
            if tensorboard and int(config.get("budget", 0)) > 0:
                config = {**config, "tensorboard": True}
            train = by_model_seed.get((config.get("model"), config["seed"]))
            jobs.append(
                DownstreamJob(
                    tuple(sorted((k, _frozen(v)) for k, v in config.items())),
                    train.key if config["agent"] == "dream" and train is not None else None,
                )
            )
    return jobs


def execute_downstream_job(job: DownstreamJob, run_dir: str) -> DownstreamRecord:
    """Executor entry point (``fn(job, run_dir) -> record``)."""
    return DownstreamRecord.from_dict(run_agent_job(job.job_config(Path(run_dir))))


# --------------------------------------------------------------------------- report
def downstream_files(run_dir: Path) -> list[Path]:
    """The downstream records of a run: those ``run.json`` lists under ``downstream``
    (the last preset run), else every ``downstream/*.json``."""
    run_dir = Path(run_dir)
    return listed_files(run_dir, "downstream", "downstream record", run_dir / STORE_DIR)


def load_downstream(run_dir: Path) -> list[DownstreamRecord]:
    """Read and validate the downstream records of a run (each against its digest)."""
    out = []
    for path in downstream_files(run_dir):
        raw = read_json(path)
        out.append(DownstreamRecord.from_dict(raw, path))
        check_digest(raw, path)
    return out


def _agents_line(records: Sequence[DownstreamRecord]) -> str:
    """What the trained agents were: policy and parallel envs (``unknown`` in older records)."""
    trained = [r for r in records if r.budget > 0]
    if not trained:
        return ""
    policies = sorted({r.policy or "unknown" for r in trained})
    counts = sorted({str(r.num_envs) if r.num_envs else "unknown" for r in trained})
    return (
        f"MaskablePPO agents: {', '.join(policies)} policy, {', '.join(counts)} parallel env(s) "
        "per agent; budget = env steps over all of them.\n\n"
    )


def build_downstream_report(
    run_dir: Path, out_dir: Path, results: Sequence[Mapping[str, Any]]
) -> dict[str, Path]:
    """Write ``downstream.md`` and ``downstream.png`` into ``out_dir`` from the stored
    downstream records, with each model's GDD taken from ``results`` (the report's result
    dicts: ``kind``, ``env``, ``model``, ``seed``, ``size``, ``gdd``). Returns the written
    files (``{}`` and stale files removed when the run has no downstream records)."""
    out_dir = Path(out_dir)
    table_path, figure_path = out_dir / f"{TABLE_NAME}.md", out_dir / f"{FIGURE_NAME}.png"
    records = load_downstream(run_dir)
    if not records:
        for path in (table_path, figure_path):
            path.unlink(missing_ok=True)
        return {}
    single = [r for r in results if r.get("kind") == "single_step"]
    multi = [r for r in results if r.get("kind") == "multi_step"]
    with_gdd: list[DownstreamRecord] = []
    for n in sorted({r.num_nodes for r in records}):
        s, m = gdd_maps(single, multi, n)
        with_gdd += attach_gdd([r for r in records if r.num_nodes == n], s, m)
    text = (
        "### Downstream RL: real-env return of agents trained in each model's dream env\n\n"
        + _agents_line(records)
        + downstream_table(with_gdd)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    if not table_path.exists() or table_path.read_text(encoding="utf-8") != text:
        table_path.write_text(text, encoding="utf-8")
    downstream_figure(with_gdd, figure_path)
    return {"table": table_path, "figure": figure_path}
