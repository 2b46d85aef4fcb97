"""Graph-native RL agents for the graphwm envs (optional extra ``graphwm-envs[agents]``).

A message-passing network (PyTorch Geometric dense layers) scores every node, so one set of
weights acts on any number of nodes N and on all four envs as ``gym.make`` returns them:

* :class:`MaskableGraphPolicy` (sb3-contrib ``MaskablePPO``) and :class:`GraphPolicy`
  (SB3 ``PPO``);
* :func:`make_graph_agent` builds a model, :func:`load_graph_agent` loads a saved one onto an
  env of any N.

Importing this subpackage imports torch; ``import graphwm_envs`` does not. See
``docs/agents.md``.
"""

from graphwm_envs.agents.loading import load_graph_agent, make_graph_agent
from graphwm_envs.agents.network import CONVS, GraphNet, ObservationEncoder
from graphwm_envs.agents.policies import GraphPolicy, MaskableGraphPolicy, action_layout

__all__ = [
    "CONVS",
    "GraphNet",
    "GraphPolicy",
    "MaskableGraphPolicy",
    "ObservationEncoder",
    "action_layout",
    "load_graph_agent",
    "make_graph_agent",
]
