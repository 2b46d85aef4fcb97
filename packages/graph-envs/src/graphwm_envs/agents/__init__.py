"""Graph-native RL agents for the graphwm envs (optional extra ``graphwm-envs[agents]``).

A message-passing network (PyTorch Geometric dense layers) scores every node, so one set of
weights acts on any number of nodes N and on all four envs as ``gym.make`` returns them:

* :class:`MaskableGraphPolicy` (sb3-contrib ``MaskablePPO``) and :class:`GraphPolicy`
  (SB3 ``PPO``);
* :func:`make_graph_agent` builds a model, :func:`load_graph_agent` loads a saved one onto an
  env of any N;
* :func:`evaluate_agent` evaluates a model the documented way (deterministic actions on the
  yardsticks' initial states ``reset(seed=seed + e)``; mean return and its standard error),
  :func:`agent_returns` gives the episode returns themselves.

Importing this subpackage imports torch; ``import graphwm_envs`` does not. Without the extra
the import fails with an ``ImportError`` that says how to install it. See ``docs/agents.md``.
"""

import warnings

#: top-level modules of the ``[agents]`` extra
_EXTRA = ("torch", "torch_geometric", "stable_baselines3", "sb3_contrib")
INSTALL_HINT = 'pip install "graphwm-envs[agents]"'

try:
    import sb3_contrib  # noqa: F401
    import stable_baselines3  # noqa: F401
    import torch  # noqa: F401

    # torch_geometric applies ``torch.jit.script`` at import time, which torch >= 2.9 deprecates
    # with a FutureWarning that every agents script would print: silenced for this import only.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning
        )
        import torch_geometric.nn  # noqa: F401
except ModuleNotFoundError as err:
    if (err.name or "").partition(".")[0] not in _EXTRA:
        raise
    raise ImportError(
        f"graphwm_envs.agents needs the optional [agents] extra (torch, torch-geometric, "
        f"stable-baselines3, sb3-contrib), but {err.name!r} is not installed: "
        f"{INSTALL_HINT}"
    ) from err

from graphwm_envs.agents.evaluation import agent_returns, evaluate_agent  # noqa: E402
from graphwm_envs.agents.loading import load_graph_agent, make_graph_agent  # noqa: E402
from graphwm_envs.agents.network import CONVS, GraphNet, ObservationEncoder  # noqa: E402
from graphwm_envs.agents.policies import (  # noqa: E402
    GraphPolicy,
    MaskableGraphPolicy,
    action_layout,
)

__all__ = [
    "CONVS",
    "GraphNet",
    "GraphPolicy",
    "MaskableGraphPolicy",
    "ObservationEncoder",
    "action_layout",
    "agent_returns",
    "evaluate_agent",
    "load_graph_agent",
    "make_graph_agent",
]
