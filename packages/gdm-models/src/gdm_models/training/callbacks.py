"""The trainers' own callbacks (:class:`~gdm_models.training.loop.Callback`): the logs (CSV,
TensorBoard), the progress bar and the two checkpoint layouts with their resume, a single
run's (:class:`RunCheckpoints`: ``latest/``, kept steps, ``final/``) and an ensemble's
(:class:`EnsembleCheckpoints`); and :class:`Guarded`, which names a caller's callback that
raised (:class:`CallbackError`)."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .checkpoint import kept_checkpoint_dir, save_checkpoint
from .config import TrainConfig
from .ensemble_state import ENSEMBLE_FILE, load_ensemble_state, save_ensemble_state
from .loop import Callback, RunInfo
from .members import OptState
from .setup import RunSetup
from .state import read_trainer_state, replacing_dir, write_trainer_state
from .tensorboard_log import LogWriter

__all__ = [
    "CallbackError",
    "CsvLog",
    "EnsembleCheckpoints",
    "Guarded",
    "Logs",
    "ProgressBar",
    "RunCheckpoints",
]


class CsvLog:
    """CSV log with one row per logged step (``step``, ``loss``, ``grad_norm``, loss terms).

    On resume (``resume_step > 0``) the rows up to ``resume_step`` on the ``log_every`` grid
    are kept (an interrupted run's extra last-step row is dropped, so the file equals that of
    an uninterrupted run) and the column order of the existing file is reused; otherwise an
    existing file is replaced.
    """

    def __init__(
        self, path: str | Path, resume_step: int = 0, log_every: int = TrainConfig.log_every
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fieldnames: list[str] | None = None
        if resume_step > 0 and self.path.is_file():
            with open(self.path, newline="") as f:
                rows = list(csv.DictReader(f))
            if rows:
                self.fieldnames = list(rows[0].keys())
            rows = [
                r for r in rows if int(r["step"]) <= resume_step and int(r["step"]) % log_every == 0
            ]
            with open(self.path, "w", newline="") as f:
                if self.fieldnames:
                    w = csv.DictWriter(f, fieldnames=self.fieldnames)
                    w.writeheader()
                    w.writerows(rows)
        elif self.path.exists():
            self.path.unlink()
        self._fh = open(self.path, "a", newline="")
        self._writer: csv.DictWriter | None = None

    def write(self, row: Mapping[str, float]) -> None:
        """Append one row and flush it (the first row fixes the columns of a new file)."""
        if self._writer is None:
            self.fieldnames = self.fieldnames or list(row.keys())
            self._writer = csv.DictWriter(self._fh, self.fieldnames, extrasaction="ignore")
            if self._fh.tell() == 0:
                self._writer.writeheader()
        self._writer.writerow(row)
        self._fh.flush()  # a row reaches the disk when logged, so `tail -f` follows the run

    def flush(self) -> None:
        """Flush to disk."""
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


class Logs(Callback):
    """Member k's rows into ``writers[k]`` (a :class:`CsvLog`, a TensorBoard log or both;
    ``None``: not logged), flushed before every checkpoint and closed at the end."""

    def __init__(self, writers: Sequence[LogWriter | None]) -> None:
        self.writers = list(writers)

    def on_row(self, k: int, row: Mapping[str, float]) -> None:
        writer = self.writers[k]
        if writer is not None:
            writer.write(row)

    def on_checkpoint(self, step: int, alive: list[int]) -> None:
        for w in self.writers:
            if w is not None:
                w.flush()

    def close(self) -> None:
        for w in self.writers:
            if w is not None:
                w.close()


class ProgressBar(Callback):
    """A tqdm bar over the run's steps, with the members' mean loss of the last logged step."""

    def __init__(self) -> None:
        self.bar: Any = None
        self._row_step, self._sum, self._n = -1, 0.0, 0

    def on_train_start(self, run: RunInfo) -> None:
        k = len(run.seeds)
        self.bar = tqdm(total=run.total, initial=run.start, dynamic_ncols=True,
                        desc="train" if k == 1 else f"train x{k}")  # fmt: skip

    def on_step_end(self, step: int, losses: Mapping[str, torch.Tensor]) -> None:
        self.bar.update(1)

    def on_row(self, k: int, row: Mapping[str, float]) -> None:
        if row["step"] != self._row_step:
            self._row_step, self._sum, self._n = int(row["step"]), 0.0, 0
        self._sum, self._n = self._sum + row["loss"], self._n + 1
        self.bar.set_postfix(loss=f"{self._sum / self._n:.4g}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class CallbackError(RuntimeError):
    """A caller's callback raised; the message names the callback, the hook and the step (the
    original exception is the ``__cause__``). The run's last checkpoint stays as written."""


class Guarded(Callback):
    """A caller's callback whose exceptions become a :class:`CallbackError` naming it."""

    def __init__(self, inner: Callback) -> None:
        self.inner, self.step = inner, 0

    def _call(self, hook: str, *args: Any) -> Any:
        try:
            return getattr(self.inner, hook)(*args)
        except Exception as err:
            name = type(self.inner).__name__
            raise CallbackError(
                f"callback {name}.{hook} raised at step {self.step}: {type(err).__name__}: {err}"
            ) from err

    def on_train_start(self, run: RunInfo) -> None:
        self.step = run.start
        self._call("on_train_start", run)

    def on_step_end(self, step: int, losses: Mapping[str, torch.Tensor]) -> bool | None:
        self.step = step
        result: bool | None = self._call("on_step_end", step, losses)
        return result

    def on_row(self, k: int, row: Mapping[str, float]) -> None:
        self._call("on_row", k, row)

    def on_failure(self, k: int, step: int, message: str) -> None:
        self._call("on_failure", k, step, message)

    def on_keep(self, step: int, alive: list[int]) -> None:
        self._call("on_keep", step, alive)

    def on_checkpoint(self, step: int, alive: list[int]) -> None:
        self._call("on_checkpoint", step, alive)

    def on_train_end(self, step: int, alive: list[int]) -> None:
        self._call("on_train_end", step, alive)

    def close(self) -> None:
        self._call("close")


class RunCheckpoints(Callback):
    """A single run's checkpoints in ``ckdir`` (:mod:`gdm_models.training.trainer`'s layout):
    ``latest/`` (a full trainer state), ``step_<6 digits>/`` (kept models) and ``final/``."""

    #: whether the run writes ``latest/`` / keeps models (the schedule's checkpoint and keep steps)
    saves_state = keeps = True

    def __init__(self, ckdir: Path, run: RunSetup) -> None:
        self.ckdir, self.run = ckdir, run
        ckdir.mkdir(parents=True, exist_ok=True)

    def resume(self) -> tuple[int, dict[int, OptState] | None]:
        """Restore ``latest/`` if there is one: (its step, its Adam state), else (0, None)."""
        latest = self.ckdir / "latest"
        if not (latest / "trainer_state.json").is_file():
            return 0, None
        run = self.run
        st = read_trainer_state(latest, run.models[0], run.args[0])
        run.models[0].load_state_dict(st.weights, strict=True)
        run.gens[0].set_state(st.generator)
        run.samplers[0].load_state_dict(st.sampler)
        return st.step, {0: st.optimizer}

    def on_keep(self, step: int, alive: list[int]) -> None:
        save_checkpoint(self.run.models[0], kept_checkpoint_dir(self.ckdir, step))

    def on_checkpoint(self, step: int, alive: list[int]) -> None:
        run = self.run
        model, opt_state = run.engine.export(0)
        with replacing_dir(self.ckdir / "latest") as tmp:
            write_trainer_state(tmp, model, opt_state, run.gens[0].get_state(),
                                run.samplers[0].state_dict(), step, run.args[0])  # fmt: skip

    def on_train_end(self, step: int, alive: list[int]) -> None:
        save_checkpoint(self.run.models[0], self.ckdir / "final")


class EnsembleCheckpoints(Callback):
    """An ensemble's checkpoints (:mod:`gdm_models.training.ensemble`'s layout): ``latest/``
    in ``root`` (``None``: none), each member's kept models beside its final checkpoint and
    the final checkpoints ``finals[k]`` (``None``: none); a failed member is recorded in
    ``failed`` (and in ``latest/ensemble.json``)."""

    def __init__(self, root: Path | None, finals: list[Path] | None, run: RunSetup) -> None:
        self.root, self.finals, self.run = root, finals, run
        self.saves_state, self.keeps = root is not None, finals is not None
        self.failed: dict[int, dict[str, Any]] = {}
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def resume(self) -> tuple[int, dict[int, OptState] | None]:
        """Restore ``root/latest`` if there is one (a save cut short between its two renames
        leaves it as ``.latest_old``): (its step, the live members' Adam states)."""
        if self.root is None:
            return 0, None
        latest, previous = self.root / "latest", self.root / ".latest_old"
        if not latest.exists() and (previous / ENSEMBLE_FILE).is_file():
            os.replace(previous, latest)
        if not (latest / ENSEMBLE_FILE).is_file():
            return 0, None
        run = self.run
        step, self.failed, opt_states = load_ensemble_state(
            latest, run.seeds, run.models, run.samplers, run.gens, run.args
        )
        return step, opt_states

    def on_failure(self, k: int, step: int, message: str) -> None:
        self.failed[k] = {"step": step, "error": message}

    def on_keep(self, step: int, alive: list[int]) -> None:
        if self.finals is not None:
            for k in alive:
                model = self.run.engine.export(k)[0]
                save_checkpoint(model, kept_checkpoint_dir(self.finals[k].parent, step))

    def on_checkpoint(self, step: int, alive: list[int]) -> None:
        if self.root is not None:
            run = self.run
            save_ensemble_state(self.root, step, run.seeds, alive, self.failed, run.engine,
                                run.samplers, run.gens, run.args)  # fmt: skip

    def on_train_end(self, step: int, alive: list[int]) -> None:
        for k in alive:
            model = self.run.engine.export(k)[0]  # the returned models hold the weights
            if self.finals is not None:
                save_checkpoint(model, self.finals[k])
