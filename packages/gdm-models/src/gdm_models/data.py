"""Observation/episode validation, tensor conversion and batching of recorded episodes.

Data contract (docs/architecture.md): an observation is a dict of numpy arrays ``adjacency`` (N,N)
int8, ``node_continuous`` (N,Fnc) float32, ``node_categorical`` (N,Fnk) int64,
``graph_continuous`` (Fgc,) float32, ``graph_categorical`` (Fgk,) int64, ``action_mask`` (N,)
int8. A feature type the env lacks may be absent from the dict (the envs leave it out): it is
read as a zero-width array (:func:`complete_observation`). A recorded episode stacks the six
keys over T+1 steps and adds ``action_nodes`` (T,N) int8, ``reward`` (T,) float32,
``terminated`` (T,) bool, ``truncated`` (T,) bool; step t maps
``obs[t] + action_nodes[t] -> obs[t+1], reward[t], terminated[t]``.

Batching of graphs of different sizes
-------------------------------------
A :class:`Batch` holds B windows of ``L`` transitions (``L + 1`` observations) taken from B
episodes that may have different node counts. Every window is **padded to the largest node
count N_max in the batch**; ``node_mask`` (B, N_max) marks the real nodes. Padded nodes have
zero features, no edges, no action and ``action_mask = 0``; models must exclude them from
pools, message passing and losses (``pair_mask`` gives the (B, N_max, N_max) mask of real,
off-diagonal node pairs). Windows shorter than ``L`` (short episodes) are padded in time and
``step_mask`` (B, L) marks the real transitions. Padding to the batch maximum (instead of
grouping by size) keeps batches i.i.d. across sizes; the training sizes (15-25 nodes) make the
padding overhead small.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .inputs import DataError, check_binary, check_categorical, check_finite
from .schema import Schema

__all__ = [
    "OBS_KEYS",
    "EPISODE_KEYS",
    "TensorObs",
    "DataError",
    "Batch",
    "EpisodeDataset",
    "EpochSampler",
    "validate_observation",
    "validate_observation_sequence",
    "validate_episode",
    "validate_action_nodes",
    "observation_to_tensors",
    "stack_observations",
    "complete_observation",
    "FEATURE_DTYPES",
    "OBSERVATION_DTYPES",
]

OBS_KEYS: tuple[str, ...] = (
    "adjacency",
    "node_continuous",
    "node_categorical",
    "graph_continuous",
    "graph_categorical",
    "action_mask",
)
EPISODE_KEYS: tuple[str, ...] = OBS_KEYS + ("action_nodes", "reward", "terminated", "truncated")
#: observation tensors by key (see :func:`observation_to_tensors`)
TensorObs = dict[str, torch.Tensor]
#: the data contract's feature dtypes (docs/contract.md): the one table every package beside
#: the envs reads (the envs, which import nothing of this package, validate their own)
FEATURE_DTYPES: dict[str, type] = {
    "node_continuous": np.float32,
    "node_categorical": np.int64,
    "graph_continuous": np.float32,
    "graph_categorical": np.int64,
}
#: dtypes of an observation and of a model's sampled prediction (0/1 arrays as int8)
OBSERVATION_DTYPES: dict[str, type] = {
    "adjacency": np.int8,
    **FEATURE_DTYPES,
    "action_mask": np.int8,
}


def complete_observation(obs: Mapping[str, Any]) -> dict[str, Any]:
    """``obs`` with every absent feature key added as a zero-width array (contract: an env
    leaves out a feature type it lacks).

    Leading axes and N come from ``adjacency`` ((..., N, N)): an absent node key becomes
    (..., N, 0), an absent graph key (..., 0). Present keys are passed through unchanged.
    """
    if all(k in obs for k in FEATURE_DTYPES) or "adjacency" not in obs:
        return dict(obs)
    adj_shape = np.shape(obs["adjacency"])
    out = dict(obs)
    for key, dtype in FEATURE_DTYPES.items():
        if key not in out:
            shape = adj_shape[:-1] if key.startswith("node") else adj_shape[:-2]
            out[key] = np.zeros((*shape, 0), dtype=dtype)
    return out


def validate_observation_sequence(obs: Mapping[str, Any], schema: Schema, *, lead: int) -> int:
    """Validate observation arrays with ``lead`` leading axes (0 = one observation).

    Checks keys, shapes, dtypes kinds, finiteness, binary and categorical ranges, adjacency
    symmetry and zero diagonal. An absent feature key counts as zero-width (so it is an error
    only where the schema has features of that type). Returns the node count N.
    """
    obs = complete_observation(obs)
    missing = [k for k in OBS_KEYS if k not in obs]
    if missing:
        raise DataError(f"observation is missing keys {missing}")
    arr = {k: np.asarray(obs[k]) for k in OBS_KEYS}
    adj = arr["adjacency"]
    if adj.ndim != lead + 2 or adj.shape[-1] != adj.shape[-2]:
        raise DataError(
            f"adjacency must have shape (...,N,N) with {lead} leading axes, got {adj.shape}"
        )
    n = adj.shape[-1]
    if n == 0:
        raise DataError("adjacency has 0 nodes; a world model needs graphs of N >= 1 nodes")
    lead_shape = adj.shape[:lead]
    expected = {
        "node_continuous": lead_shape + (n, schema.num_node_continuous),
        "node_categorical": lead_shape + (n, schema.num_node_categorical),
        "graph_continuous": lead_shape + (schema.num_graph_continuous,),
        "graph_categorical": lead_shape + (schema.num_graph_categorical,),
        "action_mask": lead_shape + (n,),
    }
    for k, shape in expected.items():
        if arr[k].shape != shape:
            raise DataError(
                f"{k} has shape {arr[k].shape}, expected {shape} (node count N={n} from adjacency)"
            )
    check_binary("adjacency", adj)
    if not np.array_equal(adj, np.swapaxes(adj, -1, -2)):
        raise DataError("adjacency must be symmetric (undirected graph)")
    if n and np.any(np.diagonal(adj, axis1=-2, axis2=-1)):
        raise DataError("adjacency must have a zero diagonal (no self-loops)")
    check_finite("node_continuous", arr["node_continuous"])
    check_finite("graph_continuous", arr["graph_continuous"])
    check_categorical("node_categorical", arr["node_categorical"], schema.node_cardinalities)
    check_categorical("graph_categorical", arr["graph_categorical"], schema.graph_cardinalities)
    check_binary("action_mask", arr["action_mask"])
    return n


def validate_observation(obs: Mapping[str, Any], schema: Schema) -> int:
    """Validate one observation dict against ``schema``; return its node count N."""
    return validate_observation_sequence(obs, schema, lead=0)


def validate_start_observations(obs: Mapping[str, Any], schema: Schema) -> int:
    """B start observations (tensors or arrays with a leading B axis, ``WorldModel.start``)
    checked as :func:`validate_observation_sequence` checks a trajectory (one copy to the host
    per start, not per step); returns N."""
    if not isinstance(obs, Mapping):
        raise TypeError(f"start takes a dict of observation tensors, got {type(obs).__name__}")
    host = {
        k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
        for k, v in obs.items()
    }
    return validate_observation_sequence(host, schema, lead=1)


def validate_action_nodes(action_nodes: Any, n: int, *, lead: int = 0) -> np.ndarray:
    """Validate a per-node action indicator with ``lead`` leading axes; return it as int8."""
    a = np.asarray(action_nodes)
    if a.ndim != lead + 1 or a.shape[-1] != n:
        raise DataError(
            f"action_nodes has shape {a.shape}, expected {lead} leading axes and N={n} nodes"
        )
    check_binary("action_nodes", a)
    return a.astype(np.int8)


def validate_episode(ep: Mapping[str, Any], schema: Schema) -> tuple[int, int]:
    """Validate a recorded episode; return ``(T, N)`` (transitions, nodes)."""
    ep = complete_observation(ep)
    missing = [k for k in EPISODE_KEYS if k not in ep]
    if missing:
        raise DataError(f"episode is missing keys {missing}")
    n = validate_observation_sequence(ep, schema, lead=1)
    t1 = np.asarray(ep["adjacency"]).shape[0]
    t = t1 - 1
    if t < 1:
        raise DataError("episode must contain at least one transition (T+1 >= 2 observations)")
    validate_action_nodes(ep["action_nodes"], n, lead=1)
    if np.asarray(ep["action_nodes"]).shape[0] != t:
        raise DataError(
            f"action_nodes has {np.asarray(ep['action_nodes']).shape[0]} steps, expected T={t}"
        )
    for k in ("reward", "terminated", "truncated"):
        a = np.asarray(ep[k])
        if a.shape != (t,):
            raise DataError(f"{k} has shape {a.shape}, expected ({t},)")
    check_finite("reward", np.asarray(ep["reward"], dtype=np.float64))
    term = np.asarray(ep["terminated"]).astype(bool)
    if term[:-1].any():
        raise DataError("terminated is True before the last transition of the episode")
    return t, n


def stack_observations(obs_list: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Stack a list of observation dicts into one dict with a leading time axis (absent
    feature keys become zero-width arrays)."""
    if len(obs_list) == 0:
        raise DataError("cannot stack an empty list of observations")
    full = [complete_observation(o) for o in obs_list]
    return {k: np.stack([np.asarray(o[k]) for o in full]) for k in OBS_KEYS}


def observation_to_tensors(
    obs: Mapping[str, Any], device: torch.device | str | None = None
) -> dict[str, torch.Tensor]:
    """Convert an observation dict (or a stacked sequence) to torch tensors.

    Dtypes: ``adjacency``/``action_mask`` float32 (0/1), continuous float32, categorical int64.
    Leading axes are kept; absent feature keys become zero-width tensors.
    """
    obs = complete_observation(obs)
    out = {}
    for k in OBS_KEYS:
        a = np.asarray(obs[k])
        if k in ("node_categorical", "graph_categorical"):
            t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))
        else:
            t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        out[k] = t.to(device) if device is not None else t
    return out


PREDICTION_KEYS: tuple[str, ...] = OBS_KEYS + ("reward", "continuation")

#: numpy dtypes of a sampled prediction: the contract's observation dtypes, reward and
#: continuation (:data:`gdm_models.data.OBSERVATION_DTYPES`)
NP_DTYPES: dict[str, type] = {**OBSERVATION_DTYPES, "reward": np.float32, "continuation": np.int64}


def predictions_to_numpy(pred: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Convert a dict of predicted tensors to numpy arrays with the environment's dtypes."""
    missing = [k for k in PREDICTION_KEYS if k not in pred]
    if missing:
        raise KeyError(f"prediction is missing keys {missing}")
    out: dict[str, np.ndarray] = {}
    for k in PREDICTION_KEYS:
        a = pred[k].detach().cpu()
        if NP_DTYPES[k] in (np.int8, np.int64):
            a = a.round() if a.is_floating_point() else a
        out[k] = np.ascontiguousarray(a.numpy().astype(NP_DTYPES[k]))
    return out


@dataclass
class Batch:
    """A padded batch of B windows of L transitions (see module docstring).

    Shapes (N = N_max of the batch): ``adjacency`` (B,L+1,N,N) float 0/1, ``node_continuous``
    (B,L+1,N,Fnc) float, ``node_categorical`` (B,L+1,N,Fnk) long, ``graph_continuous``
    (B,L+1,Fgc) float, ``graph_categorical`` (B,L+1,Fgk) long, ``action_mask`` (B,L+1,N) float,
    ``action_nodes`` (B,L,N) float, ``reward`` (B,L) float, ``continuation`` (B,L) float
    (1 - terminated), ``node_mask`` (B,N) bool, ``step_mask`` (B,L) bool.
    Step t of the window maps observation t and ``action_nodes[:, t]`` to observation t+1.
    """

    adjacency: torch.Tensor
    node_continuous: torch.Tensor
    node_categorical: torch.Tensor
    graph_continuous: torch.Tensor
    graph_categorical: torch.Tensor
    action_mask: torch.Tensor
    action_nodes: torch.Tensor
    reward: torch.Tensor
    continuation: torch.Tensor
    node_mask: torch.Tensor
    step_mask: torch.Tensor

    @property
    def batch_size(self) -> int:
        """B."""
        return self.adjacency.shape[0]

    @property
    def seq_len(self) -> int:
        """L (number of transitions per window)."""
        return self.action_nodes.shape[1]

    @property
    def num_nodes(self) -> int:
        """N_max (padded node count)."""
        return self.adjacency.shape[-1]

    @property
    def pair_mask(self) -> torch.Tensor:
        """(B,N,N) bool mask of real, off-diagonal node pairs."""
        m = self.node_mask[:, :, None] & self.node_mask[:, None, :]
        eye = torch.eye(self.num_nodes, dtype=torch.bool, device=m.device)
        return m & ~eye

    def observation(self, t: int) -> dict[str, torch.Tensor]:
        """Observation tensors at window index ``t`` (0..L), batch axis first."""
        return {k: getattr(self, k)[:, t] for k in OBS_KEYS}

    def to(self, device: torch.device | str) -> Batch:
        """Return a copy with every tensor moved to ``device``."""
        return Batch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def pad_nodes(self, n: int) -> Batch:
        """The batch with its node axes zero-padded to ``n`` nodes (padded nodes are masked
        out, so every loss term is unchanged; static shapes under ``torch.compile``)."""
        pad = n - self.num_nodes
        if pad < 0:
            raise ValueError(f"cannot pad a batch of {self.num_nodes} nodes to {n}")
        if pad == 0:
            return self
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["adjacency"] = F.pad(out["adjacency"], (0, pad, 0, pad))
        for k in ("node_continuous", "node_categorical"):
            out[k] = F.pad(out[k], (0, 0, 0, pad))
        for k in ("action_mask", "action_nodes", "node_mask"):
            out[k] = F.pad(out[k], (0, pad))
        return Batch(**out)

    def pad_nodes_to_multiple(self, multiple: int) -> Batch:
        """:meth:`pad_nodes` to the next multiple of ``multiple`` nodes."""
        return self.pad_nodes(-(-self.num_nodes // multiple) * multiple)


class EpisodeDataset:
    """Recorded episodes (variable node counts) from which training windows are drawn.

    Args:
        episodes: list of episode dicts (data contract in the module docstring).
        schema: the feature schema (dict or :class:`Schema`).
        seq_len: default window length L (transitions), 20 as in the paper.
        validate: validate every episode on construction (recommended).
    """

    def __init__(
        self,
        episodes: Sequence[Mapping[str, Any]],
        schema: Mapping[str, Any] | Schema,
        *,
        seq_len: int = 20,
        validate: bool = True,
    ) -> None:
        self.schema = Schema.from_dict(schema)
        if len(episodes) == 0:
            raise DataError("EpisodeDataset needs at least one episode")
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.seq_len = int(seq_len)
        self.episodes: list[dict[str, np.ndarray]] = []
        self.lengths: list[int] = []
        self.node_counts: list[int] = []
        for i, ep in enumerate(episodes):
            ep = complete_observation(ep)
            if validate:
                try:
                    t, n = validate_episode(ep, self.schema)
                except DataError as e:
                    raise DataError(f"episode {i}: {e}") from None
            else:
                t, n = np.asarray(ep["reward"]).shape[0], np.asarray(ep["adjacency"]).shape[-1]
            self.episodes.append({k: np.asarray(ep[k]) for k in EPISODE_KEYS})
            self.lengths.append(t)
            self.node_counts.append(n)

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def num_transitions(self) -> int:
        """Total number of stored transitions."""
        return int(sum(self.lengths))

    def make_batch(self, windows: Sequence[tuple[int, int]], seq_len: int | None = None) -> Batch:
        """Build a padded :class:`Batch` from ``(episode_index, start_step)`` pairs."""
        L = self.seq_len if seq_len is None else int(seq_len)
        B = len(windows)
        n_max = max(self.node_counts[e] for e, _ in windows)
        s = self.schema
        adj = np.zeros((B, L + 1, n_max, n_max), np.float32)
        nc = np.zeros((B, L + 1, n_max, s.num_node_continuous), np.float32)
        nk = np.zeros((B, L + 1, n_max, s.num_node_categorical), np.int64)
        gc = np.zeros((B, L + 1, s.num_graph_continuous), np.float32)
        gk = np.zeros((B, L + 1, s.num_graph_categorical), np.int64)
        am = np.zeros((B, L + 1, n_max), np.float32)
        an = np.zeros((B, L, n_max), np.float32)
        rew = np.zeros((B, L), np.float32)
        cont = np.ones((B, L), np.float32)
        node_mask = np.zeros((B, n_max), bool)
        step_mask = np.zeros((B, L), bool)
        for b, (e, start) in enumerate(windows):
            ep = self.episodes[e]
            n, t_ep = self.node_counts[e], self.lengths[e]
            if not 0 <= start < t_ep:
                raise DataError(f"window start {start} outside episode {e} with T={t_ep}")
            ln = min(L, t_ep - start)
            o = slice(start, start + ln + 1)
            adj[b, : ln + 1, :n, :n] = ep["adjacency"][o]
            nc[b, : ln + 1, :n] = ep["node_continuous"][o]
            nk[b, : ln + 1, :n] = ep["node_categorical"][o]
            gc[b, : ln + 1] = ep["graph_continuous"][o]
            gk[b, : ln + 1] = ep["graph_categorical"][o]
            am[b, : ln + 1, :n] = ep["action_mask"][o]
            a = slice(start, start + ln)
            an[b, :ln, :n] = ep["action_nodes"][a]
            rew[b, :ln] = ep["reward"][a]
            cont[b, :ln] = 1.0 - ep["terminated"][a].astype(np.float32)
            node_mask[b, :n] = True
            step_mask[b, :ln] = True
        t = torch.from_numpy
        return Batch(
            adjacency=t(adj),
            node_continuous=t(nc),
            node_categorical=t(nk),
            graph_continuous=t(gc),
            graph_categorical=t(gk),
            action_mask=t(am),
            action_nodes=t(an),
            reward=t(rew),
            continuation=t(cont),
            node_mask=t(node_mask),
            step_mask=t(step_mask),
        )

    def random_start(self, episode: int, seq_len: int, rng: np.random.Generator) -> int:
        """Uniform window start so that the window lies inside the episode when possible."""
        t = self.lengths[episode]
        return int(rng.integers(0, max(t - seq_len, 0) + 1))

    def sample_batch(
        self, batch_size: int, rng: np.random.Generator, seq_len: int | None = None
    ) -> Batch:
        """Sample ``batch_size`` episodes uniformly with replacement, one random window each."""
        L = self.seq_len if seq_len is None else int(seq_len)
        eps = rng.integers(0, len(self), size=batch_size)
        return self.make_batch([(int(e), self.random_start(int(e), L, rng)) for e in eps], L)


class EpochSampler:
    """Stateful epoch-based window sampler with exactly restorable state.

    An *epoch* visits every episode once in a random order, taking one uniformly placed window
    of ``seq_len`` transitions from each; consecutive episodes form batches of ``batch_size``
    (the last batch of an epoch may be smaller). ``state_dict``/``load_state_dict`` allow an
    exact resume mid-epoch.
    """

    def __init__(
        self, dataset: EpisodeDataset, batch_size: int, seq_len: int, seed: int | None = 0
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.seq_len = int(seq_len)
        self.rng = np.random.default_rng(seed)
        self._order: list[int] = []
        self._pos = 0

    @property
    def batches_per_epoch(self) -> int:
        """Number of batches in one epoch."""
        return -(-len(self.dataset) // self.batch_size)

    def next_batch(self) -> Batch:
        """Return the next batch, starting a new shuffled epoch when needed."""
        return self.dataset.make_batch(self.next_windows(), self.seq_len)

    def next_windows(self) -> list[tuple[int, int]]:
        """The ``(episode_index, start_step)`` windows of the next batch (what
        :meth:`next_batch` builds its batch from; the sampler advances the same way)."""
        if self._pos >= len(self._order):
            self._order = [int(i) for i in self.rng.permutation(len(self.dataset))]
            self._pos = 0
        eps = self._order[self._pos : self._pos + self.batch_size]
        self._pos += len(eps)
        return [(e, self.dataset.random_start(e, self.seq_len, self.rng)) for e in eps]

    def state_dict(self) -> dict[str, Any]:
        """JSON-able sampler state."""
        return {"rng": self.rng.bit_generator.state, "order": list(self._order), "pos": self._pos}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        self.rng.bit_generator.state = state["rng"]
        self._order = [int(i) for i in state["order"]]
        self._pos = int(state["pos"])
