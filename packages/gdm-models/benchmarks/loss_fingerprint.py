"""Numerical fingerprint of every model: loss terms, gradients and samples on fixed inputs.

A refactoring that must not change behaviour is checked by running this script before and
after it and comparing the outputs byte for byte (``diff``). For the GDM, each of its six
ablations and the three baselines it prints, on fixed synthetic batches with fixed seeds:

* the training-loss terms (full float ``repr``) and a SHA-256 of all parameter gradients;
* the step-by-step reference loss (:mod:`gdm_models.reference`) on the same batch;
* ``observe`` / ``observe_at`` / ``imagine_multi`` samples (hashes and a few values);
* the parameters after a few optimiser steps of :func:`gdm_models.train` (also with clipping
  that bites and the static step) and of :func:`gdm_models.train_ensemble` (member and loop
  engines, eager and static).

Run (CPU, about a minute):
    uv run python packages/gdm-models/benchmarks/loss_fingerprint.py > fingerprint.txt
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from gdm_models import (
    OBS_KEYS,
    EpisodeDataset,
    FeatureScaler,
    MemberModel,
    TrainConfig,
    make_model,
    train,
    train_ensemble,
)
from gdm_models import reference as ref
from gdm_models.gdm import Noise
from gdm_models.synthetic import SYNTHETIC_SCHEMA, TINY_GDM_CONFIG, random_episode

GDM_TINY = dict(TINY_GDM_CONFIG)
ABLATIONS = (
    "no-graph-state",
    "no-beta-h",
    "no-h-plus",
    "bernoulli-adj",
    "all-pairs-mp",
    "no-recurrent-adj",
)
MODELS: dict[str, dict[str, Any]] = {
    "gdm": dict(GDM_TINY, mp_layers=2),
    **{f"gdm:{a}": dict(GDM_TINY) for a in ABLATIONS},
    "vanilla-gwm": {"hidden_dim": 8, "mp_layers": 2},
    "ea-gwm": {"hidden_dim": 8, "mp_layers": 2, "rollout_steps": 3},
    "g-rssm": {
        "embed_dim": 8,
        "hidden_dim": 8,
        "latent_groups": 2,
        "latent_classes": 3,
        "attn_heads": 2,
        "encoder_layers": 1,
    },
}


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:24]


def _tensor_digest(tensors: list[torch.Tensor]) -> str:
    return _digest([t.detach().cpu().numpy() for t in tensors])


def _grad_digest(model: torch.nn.Module) -> str:
    named = [(n, p.grad) for n, p in model.named_parameters()]
    missing = [n for n, g in named if g is None]
    grads = [g for _, g in named if g is not None]
    return f"{_tensor_digest(grads)} (no grad: {missing})"


def _terms(terms: dict[str, float]) -> str:
    return ", ".join(f"{k}={float(v)!r}" for k, v in sorted(terms.items()))


def _reference_loss(model: Any, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """The step-by-step reference loss of :mod:`gdm_models.reference` on ``batch``."""
    if model.model_name.startswith("gdm"):
        noise = Noise(torch.Generator().manual_seed(1), model.device)
        return ref.gdm_loss_reference(model, batch, noise)
    fn = ref.grssm_loss_reference if model.model_name == "g-rssm" else ref.gwm_loss_reference
    return fn(model, batch, torch.Generator().manual_seed(1))


def main() -> None:
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    episodes = [random_episode(int(rng.integers(5, 9)), 10, rng) for _ in range(5)]
    episodes.append(random_episode(6, 3, rng, terminate=True))
    scaler = FeatureScaler.fit(episodes, SYNTHETIC_SCHEMA)
    dataset = EpisodeDataset(episodes, SYNTHETIC_SCHEMA, seq_len=4)
    batches = {
        "padded": dataset.make_batch([(0, 0), (1, 3), (5, 0)], seq_len=4),
        "one": dataset.make_batch([(2, 5)], seq_len=3),
    }
    ep = episodes[3]
    obs = {k: ep[k][:4] for k in OBS_KEYS}
    acts = ep["action_nodes"][:3]
    future = ep["action_nodes"][3:6]
    for name, overrides in MODELS.items():
        print(f"== {name}")
        torch.manual_seed(7)
        model = make_model(name, SYNTHETIC_SCHEMA, scaler, **overrides)
        print(f"params {_tensor_digest(list(model.parameters()))}")
        for bname, batch in batches.items():
            # EA-GWM's power-iteration buffers move with every loss in training mode: the
            # reference starts from the same buffers as the fast loss, the next batch from
            # those the fast loss left
            before = {k: v.clone() for k, v in model.state_dict().items()}
            model.zero_grad()
            total, terms = model.loss(batch, generator=torch.Generator().manual_seed(1))
            total.backward()
            print(f"loss[{bname}] total={total.item()!r} {_terms(terms)}")
            print(f"grad[{bname}] {_grad_digest(model)}")
            after = {k: v.clone() for k, v in model.state_dict().items()}
            model.load_state_dict(before)
            model.zero_grad()
            total_r, terms_r = _reference_loss(model, batch)
            total_r.backward()
            print(f"ref_loss[{bname}] total={total_r.item()!r} {_terms(terms_r)}")
            print(f"ref_grad[{bname}] {_grad_digest(model)}")
            model.load_state_dict(after)
        model.zero_grad()
        latent = model.observe(obs, acts, generator=5)
        latents = model.observe_at(obs, acts, [0, 2, 3], generator=5)
        for i, lat in enumerate([latent, *latents]):
            if isinstance(lat, dict):
                print(f"latent[{i}] {_digest([np.asarray(lat[k]) for k in sorted(lat)])}")
            else:
                import dataclasses

                fields = [getattr(lat, f.name) for f in dataclasses.fields(lat)]
                print(f"latent[{i}] {_tensor_digest(fields)}")
        for s, seed in ((1, 3), (4, 11)):
            preds = model.imagine_multi(latent, future, s, generator=seed)
            arrays = [p[k] for p in preds for k in sorted(p)]
            print(f"imagine[S={s}] {_digest(arrays)} reward={preds[-1]['reward'].tolist()!r}")
        per_sample = np.stack([future] * 3, 1)
        per_sample[:, 1] = per_sample[::-1, 1]
        preds = model.imagine_multi(latents[1], per_sample, 3, generator=2)
        print(f"imagine[KSN] {_digest([p[k] for p in preds for k in sorted(p)])}")
        torch.manual_seed(7)
        fresh = make_model(name, SYNTHETIC_SCHEMA, scaler, **overrides)
        res = train(
            fresh,
            dataset,
            TrainConfig(steps=3, batch_size=2, seq_len=3, lr=1e-3, seed=4),
            progress=False,
            keep_history=True,
        )
        print(f"train params {_tensor_digest(list(fresh.parameters()))}")
        print(f"train last {_terms(res.history[-1])}")
        _training_variants(name, overrides, scaler, dataset)


def _training_variants(
    name: str, overrides: dict[str, Any], scaler: FeatureScaler, dataset: EpisodeDataset
) -> None:
    """The trainer's other paths: clipping that bites, the static (capture) step on the CPU,
    and the ensemble engines (members and loop, eager and static)."""
    kw = TrainConfig(steps=3, batch_size=2, seq_len=3, lr=1e-3)
    for label, extra in (("clip", {"grad_clip": 0.01}), ("static", {"capture": True})):
        torch.manual_seed(7)
        fresh = make_model(name, SYNTHETIC_SCHEMA, scaler, **overrides)
        res = train(fresh, dataset, replace(kw, seed=4, **extra), progress=False, keep_history=True)
        print(f"train[{label}] params {_tensor_digest(list(fresh.parameters()))}")
        print(f"train[{label}] last {_terms(res.history[-1])}")
    strategies = (
        ("members", "loop")
        if isinstance(make_model(name, SYNTHETIC_SCHEMA, scaler, **overrides), MemberModel)
        else ("loop",)
    )
    for strategy in strategies:
        for capture in (False, True):
            ens = train_ensemble(
                name,
                [4, 9],
                dataset,
                replace(kw, strategy=strategy, capture=capture, grad_clip=0.05),
                scaler=scaler,
                model_config=overrides,
                progress=False,
                keep_history=True,
            )
            for m, member in zip(ens.models, ens.members, strict=True):
                tag = f"ensemble[{strategy},capture={capture},seed={member.seed}]"
                print(f"{tag} params {_tensor_digest(list(m.parameters()))}")
                print(f"{tag} last {_terms(member.history[-1])}")


if __name__ == "__main__":
    main()
