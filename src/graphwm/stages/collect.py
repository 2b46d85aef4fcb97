"""Stage 1: random-policy rollouts, stored as one compressed npz per env, split and size.

On-disk format (``RUN_DIR/data/<ENV>/<split>_n<N>-<key>.npz``, see :class:`DataRef`; loaded
with ``allow_pickle=False``):

* ``seeds`` (E,) int64: the reset seed of each episode (the policy RNG is derived from it;
  the seed scheme and the recorder are :mod:`graphwm.episodes`);
* ``lengths`` (E,) int64: transitions per episode T_e;
* ``actions`` (sum T_e, k) int64: raw env actions (for exact replay from the seed);
* ``action_nodes`` (sum T_e, N) int8, ``reward`` (sum T_e,) float32,
  ``terminated`` / ``truncated`` (sum T_e,) bool;
* with observations stored: the six observation keys concatenated over episodes, each
  episode contributing T_e + 1 rows (``adjacency`` (sum (T_e + 1), N, N) int8, ...).

Test splits store no observations (they reach 1000 nodes): the evaluation replays each episode
from its seed and actions, which reproduces it exactly. Each npz has a sidecar record
(``.json``: its key, seeds and SHA-256); ``RUN_DIR/data/manifest.json`` gathers them with the
package versions.
"""

from __future__ import annotations

import time
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from graphwm.episodes import SPLIT_SEED_BASE, episode_seed, record_episode
from graphwm.metric.graph import OBS_KEYS
from graphwm.store.files import (
    CorruptFileError,
    atomic_save_npz,
    atomic_write_json,
    content_key,
    inside,
    read_json,
    regular_file,
    sha256_file,
)
from graphwm.store.paths import refuse_old_names, safe_name
from graphwm.store.results import log_event

DATA_FORMAT = "graphwm-episodes/1"


def save_episodes(path: Path, episodes: list[dict], seeds: Iterable[int]) -> None:
    """Write episodes to one compressed npz (format in the module docstring), atomically."""
    arrays = {
        "seeds": np.asarray(list(seeds), dtype=np.int64),
        "lengths": np.asarray([len(e["reward"]) for e in episodes], dtype=np.int64),
    }
    for key in episodes[0]:
        arrays[key] = np.concatenate([e[key] for e in episodes])
    atomic_save_npz(path, arrays)


def load_episodes(path: Path) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """Read an npz written by :func:`save_episodes`; returns ``(episodes, seeds)``."""
    if Path(path).exists():
        regular_file(Path(path))  # a FIFO would block np.load forever
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, TypeError, zipfile.BadZipFile, EOFError) as err:
        if not Path(path).exists():
            raise FileNotFoundError(f"episode file {path} does not exist; run collect") from None
        raise CorruptFileError(Path(path), f"not a readable npz ({err})") from None
    if "lengths" not in arrays or "seeds" not in arrays:
        raise CorruptFileError(Path(path), "lacks the 'lengths' or 'seeds' array")
    for name, value in arrays.items():  # a member that is not an .npy loads as raw bytes
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            raise CorruptFileError(Path(path), f"not a readable npz (member {name!r} is no array)")
    if arrays["lengths"].ndim != 1 or arrays["lengths"].dtype.kind not in "iu":
        raise CorruptFileError(Path(path), "not a readable npz ('lengths' is no 1-d integer array)")
    lengths = arrays.pop("lengths")
    seeds = arrays.pop("seeds")
    has_obs = "adjacency" in arrays
    t_ends = np.cumsum(lengths)
    episodes = []
    for i, length in enumerate(lengths):
        t0 = int(t_ends[i] - length)
        ep = {k: arrays[k][t0 : t0 + length] for k in arrays if k not in OBS_KEYS}
        if has_obs:
            o0 = t0 + i  # each episode stores one more observation than transitions
            for key in OBS_KEYS:
                ep[key] = arrays[key][o0 : o0 + length + 1]
        episodes.append(ep)
    return episodes, seeds


@dataclass(frozen=True)
class DataRef:
    """One collected file: the episodes of one env, split and size (a content-keyed object).

    Everything that determines the file is a field, so the key (and the file name) changes
    whenever the file would.
    """

    env: str
    split: str
    num_nodes: int
    episodes: int
    observations: bool

    @property
    def key(self) -> str:
        return content_key("data", {**asdict(self), "format": DATA_FORMAT})

    @property
    def seeds(self) -> list[int]:
        return [episode_seed(self.split, self.num_nodes, i) for i in range(self.episodes)]

    @property
    def relpath(self) -> str:
        """The npz, relative to the run directory."""
        digest = self.key.split("-", 1)[1]
        return f"data/{safe_name(self.env)}/{self.split}_n{self.num_nodes}-{digest}.npz"

    def path(self, run_dir: Path) -> Path:
        return Path(run_dir) / self.relpath

    def record_path(self, run_dir: Path) -> Path:
        """The sidecar record (seeds and the npz's SHA-256), written after the npz."""
        return self.path(run_dir).with_suffix(".json")


def verify_data(run_dir: Path, ref: DataRef) -> bool:
    """Whether ``ref`` is collected and intact (``False``: absent).

    Raises:
        CorruptFileError: the record or the npz is unreadable, or the npz's SHA-256 differs
            from the record's (names the file).
    """
    record_path, path = ref.record_path(run_dir), ref.path(run_dir)
    if not record_path.exists():
        return False
    record = read_json(record_path)
    if not isinstance(record, dict) or record.get("key") != ref.key or "sha256" not in record:
        raise CorruptFileError(record_path, "not the record of this data file")
    if record.get("file") != ref.relpath:
        raise CorruptFileError(record_path, f"names file {record.get('file')!r}, not {ref.relpath}")
    if not path.exists():
        raise CorruptFileError(record_path, f"its data file {path.name} is missing")
    if sha256_file(path) != record["sha256"]:
        raise CorruptFileError(path, "SHA-256 differs from its record")
    check_npz_members(path)
    return True


#: the most bytes one collected array may claim (its header's shape x item size) before it is
#: read: a claim above this is corrupt, never allocated
MAX_ARRAY_BYTES = 16 * 2**30


def check_npz_members(path: Path) -> None:
    """Every member of an episode npz must be an ``.npy`` of numbers (bool, int, float) whose
    header claims at most :data:`MAX_ARRAY_BYTES`, read from the headers alone (cheap: no
    array is loaded), so a file the evaluate job would refuse is caught where
    ``--redo-corrupt`` can quarantine it and collect it again.

    Raises:
        CorruptFileError: naming the file and the member.
    """
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
                if dtype.hasobject or dtype.kind not in "biuf":
                    raise CorruptFileError(
                        path, f"member {info.filename!r} holds {dtype} values, not numbers"
                    )
                claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if claimed > MAX_ARRAY_BYTES:
                    raise CorruptFileError(
                        path, f"member {info.filename!r} claims {claimed} bytes (shape {shape})"
                    )
    except CorruptFileError:
        raise
    except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as err:
        raise CorruptFileError(path, f"not a readable npz ({err})") from None


def collect_file(run_dir: Path, ref: DataRef) -> dict:
    """Record the episodes of ``ref`` (npz first, then its record); returns the record."""
    seeds = ref.seeds
    episodes = [
        record_episode(ref.env, ref.num_nodes, s, store_observations=ref.observations)
        for s in seeds
    ]
    path = ref.path(run_dir)
    save_episodes(path, episodes, seeds)
    record = {
        "key": ref.key,
        "file": ref.relpath,
        **asdict(ref),
        "seeds": seeds,
        "sha256": sha256_file(path),
    }
    atomic_write_json(ref.record_path(run_dir), record)
    return record


def write_manifest(run_dir: Path) -> dict:
    """``data/manifest.json``: every collected file's record, seed scheme and versions.

    Derived from the per-file records, so it is simply rewritten (atomically) each time.
    """
    data_dir = Path(run_dir) / "data"
    files = {}
    for path in sorted(data_dir.glob("*/*.json")):
        try:
            record = read_json(path)
        except CorruptFileError:
            continue  # reported by verify_data when a stage needs the file
        if isinstance(record, dict) and "file" in record:
            target = inside(run_dir, record["file"], path)
            if not target.resolve().is_relative_to(data_dir.resolve()):
                raise CorruptFileError(path, f"names file {record['file']!r} outside data/")
            files[str(Path(record["file"]).relative_to("data"))] = record
    manifest = {
        "files": files,
        "versions": {
            pkg: metadata.version(pkg)
            for pkg in ("graphwm-envs", "gdm-models", "gdd-metric", "graphwm")
        },
        "seed_scheme": {
            "split_base": SPLIT_SEED_BASE,
            "formula": "split_base + num_nodes * 10000 + episode_index",
        },
    }
    atomic_write_json(data_dir / "manifest.json", manifest)
    return manifest


def collect(paths, refs: Iterable[DataRef], progress: bool = True) -> list[DataRef]:
    """Collect every file of ``refs`` that is not on disk yet and write the manifest.

    Idempotent; an intact file is kept. A corrupt one raises :class:`CorruptFileError`, or
    with ``paths.redo_corrupt`` is quarantined and collected again.
    """
    refs = list(dict.fromkeys(refs))
    # a run written under the old folder names (an env's name as it is): refused, before any
    # work, with the rename that makes it load (never collected again beside the old folder)
    refuse_old_names(paths.root, sorted({ref.env for ref in refs}))
    for ref in tqdm(refs, desc="collect", disable=not progress):
        try:
            done = verify_data(paths.root, ref)
        except CorruptFileError as err:
            paths.recover(err, ref.path(paths.root), ref.record_path(paths.root))
            done = False
        if not done:
            started = time.time()
            collect_file(paths.root, ref)
            log_event(paths.root, "collect", ref.key, ref.env, None, started, "done")
    while True:  # every corrupt record the manifest reads: stop, or quarantine and go on
        try:
            write_manifest(paths.root)
            return refs
        except CorruptFileError as err:
            paths.recover(err)
