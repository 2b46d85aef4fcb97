"""Base class of every graph env: the step loop, action checks, masks and clone/restore.

Subclasses implement a small set of hooks (``feature_schema``, ``_make_action_space``,
``_initial_state``, ``_transition``, ``_node_features``, ``_graph_features``, ``_mask``,
``action_to_nodes``) on a mutable state object (a dataclass of numpy arrays); optional hooks:
``_is_valid``, ``_max_steps``, ``_horizon``, ``_node_positions``, ``_setup`` and the class
attributes ``params_class``/``max_nodes``/``max_nodes_reason``/``viewer_module``
(docs/own-env.md walks through a subclass). Everything the GDD protocol and RL agents need
is provided here once:

* ``action_mask`` in every observation and :meth:`GraphEnv.action_masks` for MaskablePPO; the
  published mask is never all-zero (see :meth:`GraphEnv.node_mask`);
* episode-end discipline: ``step`` after termination or truncation raises ``RuntimeError``
  until ``reset`` (Gymnasium's vector envs reset instead of stepping, so autoreset works);
* a size limit per env (``max_nodes``, with ``max_nodes_reason``) checked in the constructor,
  so an impossible size fails at once instead of after minutes or tens of GiB;
* actions outside the action space raise ``ValueError``; actions inside the space but not
  allowed by the mask are a noop (``info["invalid_action"] = True``) unless
  ``invalid_action="raise"``;
* :meth:`GraphEnv.clone_state` / :meth:`GraphEnv.restore_state` snapshot the *full* state
  (hidden variables, step count and RNG included).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from graphwm_envs.core.schema import FeatureSchema
from graphwm_envs.core.spaces import build_observation_space
from graphwm_envs.core.validation import validate_observation

InvalidActionMode = Literal["noop", "raise"]
MIN_NODES = 5


@dataclass(frozen=True)
class EnvSnapshot:
    """An independent snapshot of an env's full state (see :meth:`GraphEnv.clone_state`)."""

    env_class: str
    num_nodes: int
    state: Any
    steps: int
    done: bool
    rng_class: str
    rng_state: dict[str, Any]
    #: the env's constant parameters (its frozen ``XParams``, or None for an env without them):
    #: a snapshot restores only into an env with equal parameters
    params: Any = None


#: the bit generators a snapshot's ``rng_class`` may name (numpy's own)
RNG_CLASSES = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _check_snapshot(snapshot: EnvSnapshot) -> np.random.BitGenerator:
    """Check a snapshot's counters, state arrays and RNG before anything is restored; return
    its bit generator. Raises ``ValueError`` naming the first bad field."""
    if isinstance(snapshot.steps, bool) or not isinstance(snapshot.steps, int | np.integer):
        raise ValueError(f"snapshot steps must be an integer, got {snapshot.steps!r}")
    if snapshot.steps < 0:
        raise ValueError(f"snapshot steps must be >= 0, got {snapshot.steps}")
    if not isinstance(snapshot.done, bool | np.bool_):
        raise ValueError(f"snapshot done must be true or false, got {snapshot.done!r}")
    fields = vars(snapshot.state) if hasattr(snapshot.state, "__dict__") else {}
    for name, value in fields.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            if not np.isfinite(value).all():
                raise ValueError(f"snapshot state array {name!r} holds NaN or inf")
    if snapshot.rng_class not in RNG_CLASSES:
        raise ValueError(
            f"snapshot rng_class must be one of {list(RNG_CLASSES)}, got {snapshot.rng_class!r}"
        )
    bitgen = getattr(np.random, snapshot.rng_class)()
    try:
        bitgen.state = copy.deepcopy(snapshot.rng_state)
    except (TypeError, ValueError, KeyError, OverflowError) as err:
        raise ValueError(
            f"snapshot rng_state is not a {snapshot.rng_class} state ({err})"
        ) from None
    return bitgen


def _check_reset_options(options: object) -> None:
    """The graph envs read no reset options: ``None`` or an empty mapping, anything else is
    refused (a key would otherwise be silently ignored)."""
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise TypeError(f"reset options must be a dict or None, got {type(options).__name__}")
    if options:
        raise ValueError(
            f"unknown reset option(s) {sorted(map(str, options))}: the graph envs read none "
            "(episodes are set by the env's constructor arguments and the seed)"
        )


def _check_seed(seed: object) -> None:
    """A restore seed is None or a non-negative integer (what ``np.random.default_rng`` takes
    as one seed); checked before anything is restored. Raises ``ValueError`` naming it."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"restore seed must be None or an integer >= 0, got {seed!r}")
    if seed < 0:
        raise ValueError(f"restore seed must be None or an integer >= 0, got {seed}")


class GraphEnv(gym.Env[dict[str, np.ndarray], Any], ABC):
    """Common machinery of the graph environments.

    Args:
        num_nodes: number of nodes N, ``5 <= N <= max_nodes`` (the env's documented limit).
        params: an instance of the env's :attr:`params_class` (``None``: its defaults); an
            env without a ``params_class`` takes none.
        invalid_action: ``"noop"`` (default) turns an action the mask forbids into a noop and
            reports ``info["invalid_action"] = True``; ``"raise"`` raises ``ValueError``.
        render_mode: ``None`` or ``"rgb_array"``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    #: Module of the env's renderer choices (``node_style``, ``status``, ...; see
    #: :mod:`graphwm_envs.core.render`); ``None``: ``graphwm_envs.<env>.viewer`` for the
    #: package's envs, the default renderer (the action mask as node colours) for any other.
    viewer_module: ClassVar[str | None] = None

    #: Largest accepted ``num_nodes``, and why (each env sets both from its own algorithms).
    max_nodes: ClassVar[int] = 5000
    max_nodes_reason: ClassVar[str] = (
        "every observation carries a dense (N, N) int8 adjacency (25 MB at N = 5000), so "
        "rollout buffers and recorded episodes grow as N^2"
    )

    #: The env's frozen parameter dataclass (``CFParams``, ...), checked and defaulted here
    #: into ``self.params``; ``None``: the env has no parameters (or sets ``params`` itself).
    params_class: ClassVar[type | None] = None

    def __init__(
        self,
        num_nodes: int = 20,
        *,
        params: Any = None,
        invalid_action: InvalidActionMode = "noop",
        render_mode: str | None = None,
    ) -> None:
        if self.params_class is not None:
            if params is not None and not isinstance(params, self.params_class):
                raise TypeError(
                    f"params must be a {self.params_class.__name__} or None, got "
                    f"{type(params).__name__}"
                )
            self.params = params or self.params_class()
        elif params is not None:
            raise TypeError(f"{type(self).__name__} takes no params (it has no params_class)")
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int | np.integer):
            raise TypeError(f"num_nodes must be an int, got {num_nodes!r}")
        if num_nodes < MIN_NODES:
            raise ValueError(f"num_nodes must be >= {MIN_NODES}, got {num_nodes}")
        if num_nodes > self.max_nodes:
            raise ValueError(
                f"num_nodes must be <= {self.max_nodes} for {type(self).__name__}, got "
                f"{num_nodes}: {self.max_nodes_reason}"
            )
        if invalid_action not in ("noop", "raise"):
            raise ValueError(f"invalid_action must be 'noop' or 'raise', got {invalid_action!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.num_nodes = int(num_nodes)
        self.invalid_action = invalid_action
        self.render_mode = render_mode
        self.schema: FeatureSchema = self.feature_schema(getattr(self, "params", None))
        # gymnasium types a Dict space as Space[dict[str, Space]] (its samples are dicts of arrays)
        self.observation_space = build_observation_space(self.schema, self.num_nodes)  # type: ignore[assignment]
        self.action_space = self._make_action_space()
        self._state: Any = None
        self._steps = 0
        self._done = False
        self._layout_cache: np.ndarray | None = None
        self._render_trace: Any = None  # core.render.EpisodeTrace when rendering
        self._setup()

    def _setup(self) -> None:
        """Optional hook, the constructor's last step: build what the env derives from
        ``params`` and ``num_nodes`` (its generator, sizes). Draws no random numbers."""

    # ------------------------------------------------------------------ hooks
    @classmethod
    @abstractmethod
    def feature_schema(cls, params: Any = None) -> FeatureSchema:
        """The feature schema of this env class with ``params`` (the subclass's parameter
        dataclass; ``None``: its defaults), read without building an env: every instance's
        :attr:`schema` is ``feature_schema(instance.params)``. The size limits are class
        attributes too (:data:`MIN_NODES`, :attr:`max_nodes`)."""

    @abstractmethod
    def _make_action_space(self) -> spaces.Space:
        """The env's action space."""

    @abstractmethod
    def _initial_state(self, rng: np.random.Generator) -> Any:
        """Sample an initial state (must hold ``adjacency`` as an (N, N) bool/int8 array)."""

    @abstractmethod
    def _transition(self, action: Any | None, rng: np.random.Generator) -> tuple[float, bool, dict]:
        """Advance ``self._state`` in place; ``action`` is ``None`` for an invalid-action noop.

        Returns ``(reward, terminated, info)``.
        """

    @abstractmethod
    def _node_features(self) -> tuple[np.ndarray, np.ndarray]:
        """``(node_continuous (N, Fnc) float32, node_categorical (N, Fnk) int64)``."""

    @abstractmethod
    def _graph_features(self) -> tuple[np.ndarray, np.ndarray]:
        """``(graph_continuous (Fgc,) float32, graph_categorical (Fgk,) int64)``."""

    @abstractmethod
    def _mask(self) -> np.ndarray:
        """Boolean (N,) mask of the nodes the agent may select now."""

    @abstractmethod
    def action_to_nodes(self, action: Any) -> np.ndarray:
        """The (N,) int8 node-selection indicator of ``action`` (the models' action input)."""

    def _is_valid(self, action: Any) -> bool:
        """Whether an in-space action is allowed by the mask (default: every node selected)."""
        return bool(np.all(self._mask()[self.action_to_nodes(action).astype(bool)]))

    def _max_steps(self) -> int | None:
        """Truncation length of the current episode (``None``: never truncated)."""
        return None

    def _horizon(self) -> int | None:
        """Most steps the current episode can last, by truncation or termination (the
        ``"horizon"`` of the reset info); by default the truncation length."""
        return self._max_steps()

    #: integer fields of the state that index a node (checked in ``[0, N)`` on restore)
    node_index_fields: ClassVar[tuple[str, ...]] = ()

    def _check_node_indices(self, state: Any) -> None:
        """A restored state's node indices (:attr:`node_index_fields`) are integers in
        ``[0, N)``; raises ``ValueError`` naming the field (a location of -1 would otherwise
        silently mean the last node)."""
        for name in self.node_index_fields:
            value = getattr(state, name, None)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"snapshot state {name} must be a node index, got {value!r}")
            if not 0 <= value < self.num_nodes:
                raise ValueError(
                    f"snapshot state {name} = {value} is not a node of this env "
                    f"(0 <= {name} < {self.num_nodes})"
                )

    def _require_reset(self, what: str) -> None:
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before {what}")

    def _node_positions(self) -> np.ndarray | None:
        """(N, 2) coordinates for spatial envs; ``None`` for a computed layout."""
        return None

    # ------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Sample a new episode; deterministic in ``seed``.

        The info holds ``"horizon"``: the most steps this episode can last (truncation for OD
        and SAR, the step limit that terminates RGC and CF), the key the dream env's reset info
        uses too.
        """
        _check_reset_options(options)  # before anything changes
        super().reset(seed=seed)
        self._state = self._initial_state(self.np_random)
        self._steps = 0
        self._done = False
        self._layout_cache = None
        self._start_render_trace()
        return self._observation(), {"horizon": self._horizon()}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Apply ``action``; see the class docstring for invalid-action handling.

        Raises ``RuntimeError`` before the first ``reset`` and after the episode has ended
        (terminated or truncated) until the next ``reset``.
        """
        self._require_reset("step()")
        if self._done:
            raise RuntimeError(
                f"{type(self).__name__}: the episode ended at step {self._steps} (terminated or "
                "truncated); call reset() before step()"
            )
        action = self._coerce_action(action)
        valid = self._is_valid(action)
        if not valid and self.invalid_action == "raise":
            raise ValueError(f"action {action!r} is not allowed by the current action mask")
        if self._render_trace is not None:
            self._render_trace.before_step(self)
        reward, terminated, info = self._transition(action if valid else None, self.np_random)
        self._steps += 1
        max_steps = self._max_steps()
        truncated = bool(not terminated and max_steps is not None and self._steps >= max_steps)
        self._done = bool(terminated or truncated)
        info = dict(info)
        info["invalid_action"] = not valid
        info["step"] = self._steps
        if self._render_trace is not None:
            self._render_trace.after_step(self, action, valid, reward, terminated, truncated, info)
        return self._observation(), float(reward), bool(terminated), truncated, info

    def render(self) -> np.ndarray | None:
        """An RGB image (H, W, 3) uint8 of the current state when ``render_mode="rgb_array"``.

        Drawn by :func:`graphwm_envs.core.render.render_env` with the env's ``viewer`` module:
        categorical features with a discrete legend, continuous ones on a scale fixed per
        episode, unobserved parts as unknown, the last step's edge changes and action marked,
        and the step, reward, return and outcome in the title.
        """
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='rgb_array'")
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        from graphwm_envs.core.render import render_env

        return render_env(self)

    def _start_render_trace(self) -> None:
        """Start recording what frames show beyond the state (only with a render_mode)."""
        if self.render_mode is not None:
            from graphwm_envs.core.render import EpisodeTrace

            self._render_trace = EpisodeTrace(self)

    # ---------------------------------------------------------- public helpers
    def node_mask(self) -> np.ndarray:
        """The published (N,) boolean node mask: ``obs["action_mask"]``.

        It is the env's mask rule, except where the rule leaves no node at all (only in
        terminal states: SAR's agent stranded on an isolated node, CF with no edge left): then
        every node is marked, so masked samplers and MaskablePPO's distribution stay defined
        on the terminal observation that autoreset vector envs return. No action is taken there
        (``step`` raises until ``reset``), and validity of an action always follows the rule.
        Raises ``RuntimeError`` before the first ``reset``.
        """
        self._require_reset("node_mask()")
        mask = self._mask().astype(bool)
        if not mask.any():
            mask = np.ones_like(mask)
        return mask

    def action_masks(self) -> np.ndarray:
        """Boolean action mask in the form sb3-contrib's MaskablePPO expects.

        ``Discrete(N)``: the (N,) node mask. ``MultiDiscrete([N] * k)``: the node mask repeated
        once per component, concatenated to shape (k * N,). Built on :meth:`node_mask`, so it
        is never all-zero. Raises ``RuntimeError`` before the first ``reset``.
        """
        self._require_reset("action_masks()")
        mask = self.node_mask()
        if isinstance(self.action_space, spaces.MultiDiscrete):
            return np.tile(mask, len(self.action_space.nvec))
        return mask

    def sample_valid_action(self, rng: np.random.Generator) -> Any:
        """A uniformly random valid action: k distinct nodes drawn from the mask.

        This is the paper's random policy (``{a subset of mask, |a| = k}``). If fewer than k
        nodes are valid, the missing components are drawn from all nodes (the step is then an
        invalid-action noop).

        Raises:
            TypeError: ``rng`` is not a ``numpy.random.Generator`` (e.g. ``env.np_random``).
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                "sample_valid_action needs a numpy.random.Generator (e.g. env.np_random), got "
                f"{type(rng).__name__}"
            )
        self._require_reset("sample_valid_action()")
        mask = self._mask().astype(bool)
        valid_nodes = np.flatnonzero(mask)
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            k = 1
        elif isinstance(space, spaces.MultiDiscrete):
            k = len(space.nvec)
        else:
            raise NotImplementedError(f"unsupported action space {space}")
        if len(valid_nodes) >= k:
            chosen = rng.choice(valid_nodes, size=k, replace=False)
        else:
            chosen = rng.integers(0, self.num_nodes, size=k)
        if isinstance(space, spaces.Discrete):
            return int(chosen[0])
        return chosen.astype(np.int64)

    def clone_state(self) -> EnvSnapshot:
        """An independent snapshot of the full state (hidden variables, steps, RNG included).

        Later steps of the env never change a snapshot.
        """
        if self._state is None:
            raise RuntimeError("call reset() before clone_state()")
        bitgen = self.np_random.bit_generator
        return EnvSnapshot(
            env_class=type(self).__qualname__,
            num_nodes=self.num_nodes,
            state=copy.deepcopy(self._state),
            steps=self._steps,
            done=self._done,
            rng_class=type(bitgen).__name__,
            rng_state=copy.deepcopy(dict(bitgen.state)),
            params=getattr(self, "params", None),
        )

    def restore_state(
        self, snapshot: EnvSnapshot, seed: int | None = None
    ) -> dict[str, np.ndarray]:
        """Restore ``snapshot`` and return its observation.

        With ``seed=None`` the RNG is restored too, so the future replays exactly. With an
        integer ``seed`` the transition randomness is reseeded from it, so restores with
        different seeds draw independent next states (the GDD protocol's env samples).

        Raises:
            TypeError: ``snapshot`` is not an :class:`EnvSnapshot`.
            ValueError: the snapshot is of another env class or size, or does not hold a
                valid state (negative or non-integer steps, NaN or inf in a state array, an
                observation that breaks the data contract such as a non-symmetric adjacency
                or self-loops, an ``rng_class`` that is not one of :data:`RNG_CLASSES`, an
                ``rng_state`` that class refuses), or ``seed`` is not None or an integer >= 0.
                A failed restore leaves the env as it was.
        """
        if not isinstance(snapshot, EnvSnapshot):
            raise TypeError(f"expected an EnvSnapshot, got {type(snapshot).__name__}")
        if snapshot.env_class != type(self).__qualname__:
            raise ValueError(
                f"snapshot of {snapshot.env_class} cannot restore a {type(self).__qualname__}"
            )
        if snapshot.num_nodes != self.num_nodes:
            raise ValueError(
                f"snapshot has {snapshot.num_nodes} nodes but this env has {self.num_nodes}"
            )
        bitgen = _check_snapshot(snapshot)
        mine = getattr(self, "params", None)
        if snapshot.params is not None and snapshot.params != mine:
            raise ValueError(
                f"snapshot was taken with other parameters ({snapshot.params}) than this env's "
                f"({mine}); a state is only meaningful under the parameters that made it"
            )
        self._check_node_indices(snapshot.state)
        _check_seed(seed)  # every check before the first change: a failed restore changes nothing
        kept = (self._state, self._steps, self._done, self._layout_cache, self.np_random)
        kept_trace = getattr(self, "_render_trace", None)
        self._state = copy.deepcopy(snapshot.state)
        self._steps = snapshot.steps
        self._done = snapshot.done
        self._layout_cache = None
        try:
            obs = self._observation()
            validate_observation(obs, self.schema, self.num_nodes)
        except Exception as err:  # a failed restore leaves the env as it was
            self._state, self._steps, self._done, self._layout_cache, self.np_random = kept
            if kept_trace is not None:
                self._render_trace = kept_trace
            raise ValueError(
                f"snapshot does not hold a valid {type(self).__qualname__} state of "
                f"{self.num_nodes} nodes ({err}); the env is left as it was"
            ) from None
        self._start_render_trace()
        if seed is None:
            self.np_random = np.random.Generator(bitgen)
        else:
            self.np_random = np.random.default_rng(seed)
        return obs

    @property
    def state(self) -> Any:
        """The current (mutable) full state; use :meth:`clone_state` for a copy."""
        return self._state

    @property
    def elapsed_steps(self) -> int:
        """Transitions taken in the current episode."""
        return self._steps

    # --------------------------------------------------------------- internals
    def _adjacency(self) -> np.ndarray:
        return self._state.adjacency

    def _observation(self) -> dict[str, np.ndarray]:
        node_cont, node_cat = self._node_features()
        graph_cont, graph_cat = self._graph_features()
        features: dict[str, np.ndarray] = {
            "node_continuous": np.asarray(node_cont, dtype=np.float32),
            "node_categorical": np.asarray(node_cat, dtype=np.int64),
            "graph_continuous": np.asarray(graph_cont, dtype=np.float32),
            "graph_categorical": np.asarray(graph_cat, dtype=np.int64),
        }
        obs: dict[str, np.ndarray] = {
            "adjacency": np.asarray(self._adjacency(), dtype=np.int8).copy()
        }
        # A feature type the env lacks is absent, not zero-width (see core/spaces.py).
        obs.update((k, v) for k, v in features.items() if v.shape[-1])
        obs["action_mask"] = self.node_mask().astype(np.int8)
        return obs

    def _coerce_action(self, action: Any) -> Any:
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            arr = np.asarray(action)
            if arr.shape != () or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"action {action!r} is not an integer in {space}")
            if not space.contains(arr.astype(np.int64)):
                raise ValueError(f"action {action!r} is outside the action space {space}")
            return int(arr)
        if isinstance(space, spaces.MultiDiscrete):
            arr = np.asarray(action)
            if arr.shape == () and space.shape == (1,):
                # a one-node selection as a scalar: torchrl turns MultiDiscrete([N]) into
                # Categorical(N) and passes the node itself
                arr = arr.reshape(1)
            if arr.shape != space.shape or not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(
                    f"action {action!r} must be an integer array of shape {space.shape} for {space}"
                )
            if not space.contains(arr.astype(space.dtype)):
                raise ValueError(f"action {action!r} is outside the action space {space}")
            return arr.astype(np.int64)
        raise NotImplementedError(f"unsupported action space {space}")

    def _computed_layout(self) -> np.ndarray:
        import networkx as nx

        graph = nx.from_numpy_array(np.asarray(self._adjacency(), dtype=np.int8))
        pos = nx.spring_layout(graph, seed=0)
        return np.array([pos[i] for i in range(self.num_nodes)], dtype=np.float64)
