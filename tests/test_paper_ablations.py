"""The paper preset runs the paper's eight GDM ablations (issue 49), the combined Bernoulli
adjacency + all-pairs message passing among them, and that variant switches off both
components in the built model (its behaviour, not its name)."""

from __future__ import annotations

import pytest
import torch
from gdm_models.gdm.latent import PriorNoise

from graphwm.checks import parse_checked
from graphwm.pipeline import preset_dict

#: the paper's ablation table (appendix): no graph state, beta_h = 0, no h+ correction,
#: Bernoulli adjacency, all-pairs message passing, Bernoulli adjacency + all-pairs message
#: passing, no recurrent adjacency, and no h+ + no graph state + no recurrent adjacency
PAPER_ABLATIONS = {
    "gdm:no-graph-state",
    "gdm:no-beta-h",
    "gdm:no-h-plus",
    "gdm:bernoulli-adj",
    "gdm:all-pairs-mp",
    "gdm:bernoulli-adj+all-pairs-mp",
    "gdm:no-recurrent-adj",
    "gdm:no-graph-state+no-h-plus+no-recurrent-adj",
}
COMBINED = "gdm:bernoulli-adj+all-pairs-mp"
ENV, N, B = "SAR", 6, 2


def test_the_paper_preset_lists_the_eight_ablations_of_the_paper():
    preset = parse_checked(preset_dict("paper"))
    assert len(preset.ablations) == 8 and set(preset.ablations) == PAPER_ABLATIONS
    assert set(preset.ablation_envs) == {"RGC", "OD", "SAR", "CF"}


@pytest.fixture(scope="module")
def variants():
    """Tiny GDMs of the full model and three variants, all with the full model's weights."""
    from gdm_models import FeatureScaler, make_model
    from tiny_models import TINY_OVERRIDES, random_policy_episodes

    from graphwm.envs import env_schema

    schema = env_schema(ENV)
    scaler = FeatureScaler.fit(random_policy_episodes(ENV, N, 2), schema)
    torch.manual_seed(0)
    full = make_model("gdm", schema, scaler, **TINY_OVERRIDES["gdm"]).eval()
    # edge logits near 0 (the initial bias keeps graphs sparse): many edges toggle per draw
    torch.nn.init.constant_(full.cell.adjacency.edge_mlp.out.bias, 0.0)
    out = {"gdm": full}
    for name in ("gdm:bernoulli-adj", "gdm:all-pairs-mp", COMBINED):
        model = make_model(name, schema, scaler, **TINY_OVERRIDES["gdm"]).eval()
        model.load_state_dict(full.state_dict())  # the switches add or drop no weight
        out[name] = model
    return out


def _adjacency(model, logits, u):
    """A_t of one adjacency draw from the empty graph, for edge logits and uniforms ``u``."""
    pm = torch.ones_like(logits, dtype=torch.bool)
    with torch.no_grad():
        return model.cell.adjacency.sample(logits, torch.zeros_like(logits), pm, u)[0]


def test_the_combined_ablation_samples_a_bernoulli_adjacency(variants):
    """A Bernoulli gate opens an edge exactly when u < sigmoid(l); the Hard Concrete gate
    opens with the same probability but on other draws of the same uniforms."""
    logits = torch.linspace(-3, 3, 7)[:, None].expand(7, 4000)
    u = torch.rand(7, 4000, generator=torch.Generator().manual_seed(0))
    bernoulli = (u < torch.sigmoid(logits)).float()
    drawn = {name: _adjacency(model, logits, u) for name, model in variants.items()}
    assert torch.equal(drawn[COMBINED], bernoulli)
    assert torch.equal(drawn["gdm:bernoulli-adj"], bernoulli)
    for name in ("gdm", "gdm:all-pairs-mp"):  # Hard Concrete: other edges open
        assert (drawn[name] != bernoulli).float().mean() > 0.05, name


def _prior_nodes(model, u_adj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prior's sampled graph and node-latent distribution for fixed states, graph and
    latent uniforms, with the adjacency uniforms ``u_adj``."""
    cell, cfg = model.cell, model.config
    g = torch.Generator().manual_seed(1)
    h_n = torch.randn(B, N, cfg.hidden_dim, generator=g)
    h_g = torch.randn(B, cell.hg_dim, generator=g)
    a_prev = torch.triu((torch.rand(B, N, N, generator=g) < 0.4).float(), 1)
    a_prev = a_prev + a_prev.transpose(-1, -2)
    node_mask = torch.ones(B, N, dtype=torch.bool)
    pair_mask = ~torch.eye(N, dtype=torch.bool).expand(B, N, N)
    u_zg = torch.rand(cell.zg_shape(B), generator=g)
    u_zn = torch.rand(cell.zn_shape(B, N), generator=g)
    with torch.no_grad():
        out = cell.prior(h_n, h_g, a_prev, node_mask, pair_mask, PriorNoise(u_zg, u_adj, u_zn))
    assert out["a_m"] is not None  # the prior samples a graph (recurrent adjacency)
    return out["a_m"], out["p_n"]


def test_the_combined_ablation_passes_messages_over_all_pairs(variants):
    """With all-pairs message passing the node prior reads the edge probabilities, not the
    sampled adjacency: redrawing the adjacency's uniforms leaves it unchanged; with the
    sampled graph's sparse messages (the full GDM, Bernoulli adjacency alone) it changes."""
    draws = []
    for seed in (2, 3):
        u = torch.rand(B, N, N, generator=torch.Generator().manual_seed(seed))
        draws.append(torch.triu(u, 1) + torch.triu(u, 1).transpose(-1, -2))
    changed = {}
    for name, model in variants.items():
        (a0, p0), (a1, p1) = (_prior_nodes(model, u) for u in draws)
        assert not torch.equal(a0, a1), name  # the two draws sample different graphs
        changed[name] = float((p0 - p1).abs().max())
    assert changed["gdm"] > 1e-4 and changed["gdm:bernoulli-adj"] > 1e-4
    assert changed["gdm:all-pairs-mp"] == 0 and changed[COMBINED] == 0
