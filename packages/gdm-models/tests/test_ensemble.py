"""Ensemble training: member k of train_ensemble is the single run with seed k."""

from __future__ import annotations

import csv
import shutil
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
from gdm_models import (
    CheckpointError,
    MemberModel,
    TrainConfig,
    WorldModel,
    load_checkpoint,
    make_model,
    train,
    train_ensemble,
)
from gdm_models.synthetic import SYNTHETIC_SCHEMA
from gdm_models.training.engines import MemberEngine
from gdm_models.training.ensemble import verify_ensemble_state
from gdm_models.training.members import member_opt_state, stack_opt_states
from gdm_models.training.step import clip_grad_norms_

from .conftest import TINY

SEEDS = [3, 5, 7]
KW = TrainConfig(steps=3, batch_size=2, seq_len=3, lr=1e-3, device="cpu")
CONFIGS = {
    "gdm": TINY,
    "gdm:no-h-plus": TINY,
    "vanilla-gwm": {"hidden_dim": 16},
    "ea-gwm": {"hidden_dim": 16},
    "g-rssm": {"hidden_dim": 16, "embed_dim": 8},
}


#: the fused GRU cell's ops (a single model's nn.GRUCell; a member model has none)
FUSED_GRU_OPS = {"aten::gru_cell", "aten::_thnn_fused_gru_cell"}


def _single(name, seed, scaler, dataset, log_csv=None, **kw):
    torch.manual_seed(seed)
    m = make_model(name, SYNTHETIC_SCHEMA, scaler, **CONFIGS[name])
    cfg = replace(KW, seed=seed, **kw)
    res = train(m, dataset, cfg, keep_history=True, progress=False, log_csv=log_csv)
    return m, res


def _undetermined(name: str, key: str, hidden: int) -> slice | None:
    """Parameter entries whose exact gradient is 0, so Adam turns rounding noise into
    lr-sized steps in any implementation: G-RSSM's attention key bias (softmax is invariant
    to a shift of all key scores)."""
    if name == "g-rssm" and key.endswith("qkv.bias"):
        return slice(hidden, 2 * hidden)
    return None


def _assert_close_weights(name, a, b, atol=2e-6):
    for key, va in a.state_dict().items():
        vb = b.state_dict()[key]
        cut = _undetermined(name, key, 16)
        if cut is not None:
            va, vb = va.clone(), vb.clone()
            va[cut] = vb[cut] = 0
        torch.testing.assert_close(va, vb, atol=atol, rtol=1e-5, msg=f"{name}: {key}")


# functorch's warning of a per-member loop can never come back: no torch.func transform is used
@pytest.mark.filterwarnings("error:There is a performance drop:UserWarning")
@pytest.mark.parametrize("name", list(CONFIGS))
def test_member_engine_members_equal_single_runs(name, scaler, dataset):
    from torch.profiler import ProfilerActivity, profile

    # the default strategy: the K members as one member model, whose GRU cells are explicit
    # products with per-member weights (no fused GRU op runs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        res = train_ensemble(
            name,
            SEEDS,
            dataset,
            KW,
            scaler=scaler,
            model_config=CONFIGS[name],
            keep_history=True,
            progress=False,
        )
    names = {e.name for e in prof.events()}
    assert not names & FUSED_GRU_OPS and "aten::baddbmm" in names
    assert res.strategy == "members" and [m.seed for m in res] == SEEDS
    for k, seed in enumerate(SEEDS):
        single, sres = _single(name, seed, scaler, dataset)
        for col in ("loss", "grad_norm"):  # the losses and the gradients (their norms)
            got = [r[col] for r in res[k].history]
            want = [r[col] for r in sres.history]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=col)
        assert set(res[k].history[0]) == set(sres.history[0])  # the same logged columns
        _assert_close_weights(name, res.models[k], single)
    # the members are different experiments (own initialisation, data and noise)
    w0, w1 = (dict(m.named_parameters()) for m in res.models[:2])
    assert any(not torch.allclose(w0[k], w1[k]) for k in w0)
    assert res[0].history[0]["loss"] != res[1].history[0]["loss"]


def test_loop_members_are_bit_identical_to_single_runs(scaler, dataset, tmp_path):
    res = train_ensemble(
        "gdm",
        SEEDS,
        dataset,
        replace(KW, strategy="loop"),
        scaler=scaler,
        model_config=TINY,
        keep_history=True,
        out_dir=tmp_path,
        progress=False,
    )
    for k, seed in enumerate(SEEDS):
        single, sres = _single("gdm", seed, scaler, dataset, log_csv=tmp_path / f"s{seed}.csv")
        assert res[k].history == sres.history
        for key, v in single.state_dict().items():
            assert torch.equal(v, res.models[k].state_dict()[key]), key
        final = load_checkpoint(res[k].final_checkpoint)
        assert all(
            torch.equal(v, final.state_dict()[key]) for key, v in single.state_dict().items()
        )
        with open(tmp_path / f"s{seed}.csv") as f, open(res[k].log_csv) as g:
            assert list(csv.DictReader(f)) == list(csv.DictReader(g))


def _poisoned(scaler, bad_seed, poison, name="gdm"):
    """Factory: the tiny model ``name``; the member built under ``bad_seed`` gets ``poison``
    applied."""

    def factory():
        m = make_model(name, SYNTHETIC_SCHEMA, scaler, **CONFIGS[name])
        if torch.initial_seed() == bad_seed:
            with torch.no_grad():
                poison(m)
        return m

    return factory


@pytest.mark.parametrize("name", ["gdm", "vanilla-gwm", "g-rssm"])
def test_nan_member_fails_alone(name, scaler, dataset, tmp_path):
    def nan(m):
        heads = m.cell.decoder if name == "gdm" else m  # the GDM's heads are in its cell
        heads.node_heads.cont.weight[0, 0] = float("nan")

    factory = _poisoned(scaler, 5, nan, name)
    res = train_ensemble(
        factory,
        SEEDS,
        dataset,
        replace(KW, strategy="members", checkpoint_every=1),
        keep_history=True,
        out_dir=tmp_path,
        progress=False,
    )
    bad = res[1]
    assert isinstance(bad.error, FloatingPointError) and bad.failed_step == 1
    assert bad.final_checkpoint is None and bad.history == []
    assert not (tmp_path / "seed5" / "final").exists()
    # as the single run fails
    torch.manual_seed(5)
    with pytest.raises(FloatingPointError):
        train(factory(), dataset, replace(KW, seed=5), progress=False)
    for k in (0, 2):
        assert res[k].ok
        single, sres = _single(name, SEEDS[k], scaler, dataset)
        np.testing.assert_allclose(
            [r["loss"] for r in res[k].history], [r["loss"] for r in sres.history], rtol=1e-5
        )
        _assert_close_weights(name, res.models[k], single)
    assert len(res.failed) == 1


def test_huge_gradient_changes_no_other_member(scaler, dataset):
    def huge(m):
        m.cell.decoder.graph_heads.reward.weight.mul_(1e6)  # finite, enormous loss and gradients

    res = train_ensemble(
        _poisoned(scaler, 5, huge),
        SEEDS,
        dataset,
        replace(KW, strategy="members"),
        keep_history=True,
        progress=False,
    )
    assert all(m.ok for m in res)
    assert res[1].history[0]["grad_norm"] > 1e6  # clipped, per member
    for k in (0, 2):
        single, sres = _single("gdm", SEEDS[k], scaler, dataset)
        np.testing.assert_allclose(
            [r["grad_norm"] for r in res[k].history],
            [r["grad_norm"] for r in sres.history],
            rtol=1e-5,
        )
        _assert_close_weights("gdm", res.models[k], single)


@pytest.mark.parametrize("strategy", ["members", "loop"])
def test_resume_after_interruption_is_exact(scaler, dataset, tmp_path, strategy):
    cfg = replace(KW, strategy=strategy, checkpoint_every=2, steps=4)
    args = dict(scaler=scaler, model_config=TINY, progress=False)
    ref = train_ensemble("gdm", SEEDS, dataset, cfg, out_dir=tmp_path / "ref", **args)
    run = tmp_path / "run"
    train_ensemble("gdm", SEEDS, dataset, replace(cfg, steps=2), out_dir=run, **args)
    for s in SEEDS:  # a job killed after step 3 has logged a row past its checkpoint (step 2)
        with open(run / f"seed{s}" / "log.csv", "a") as f:
            f.write(
                "3"
                + ",0" * (len(open(run / f"seed{s}" / "log.csv").readline().split(",")) - 1)
                + "\n"
            )
    res = train_ensemble("gdm", SEEDS, dataset, cfg, out_dir=run, **args)
    assert res.resumed_from == 2 and res.steps == 4
    for a, b in zip(ref.models, res.models, strict=True):
        for key, v in a.state_dict().items():
            assert torch.equal(v, b.state_dict()[key]), key
    for s in SEEDS:
        with (
            open(tmp_path / "ref" / f"seed{s}" / "log.csv") as f,
            open(run / f"seed{s}" / "log.csv") as g,
        ):
            assert list(csv.DictReader(f)) == list(csv.DictReader(g))


def test_member_state_is_a_single_run_checkpoint(scaler, dataset, tmp_path):
    """latest/seed<s> of an ensemble resumes a single train() run to the same weights."""
    cfg = replace(KW, strategy="loop", checkpoint_every=2, steps=2)
    train_ensemble("gdm", SEEDS, dataset, cfg, scaler=scaler, model_config=TINY,
                   out_dir=tmp_path / "ens", progress=False)  # fmt: skip
    m, single = _resume_seed5_alone(tmp_path, scaler, dataset)
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in single.state_dict().items())


def _resume_seed5_alone(tmp_path, scaler, dataset):
    """Seed 5's latest/ of the ensemble in ``tmp_path/ens`` resumed by a single train() run to
    step 4, and the straight single run of seed 5: (resumed model, single model)."""
    (tmp_path / "one").mkdir()
    shutil.copytree(tmp_path / "ens" / "latest" / "seed5", tmp_path / "one" / "latest")
    torch.manual_seed(123)
    m = make_model("gdm", SYNTHETIC_SCHEMA, scaler, **TINY)
    r = train(m, dataset, replace(KW, seed=5, steps=4), checkpoint_dir=tmp_path / "one",
              progress=False)  # fmt: skip
    assert r.resumed_from == 2
    single, _ = _single("gdm", 5, scaler, dataset, steps=4)
    return m, single


def test_member_checkpoints_are_single_model_checkpoints(scaler, dataset, tmp_path):
    """The member engine's outputs are ordinary single-model files: a member's final
    checkpoint loads on its own as a model with the member's weights, and its latest/seed<s>
    resumes a single train() run, which ends where the single run ends (up to rounding)."""
    res = train_ensemble("gdm", SEEDS, dataset, replace(KW, checkpoint_every=2, steps=2),
                         scaler=scaler, model_config=TINY, out_dir=tmp_path / "ens",
                         progress=False)  # fmt: skip
    assert res.strategy == "members"
    for k in range(len(SEEDS)):
        final = load_checkpoint(res[k].final_checkpoint)
        assert type(final) is type(res.models[k])
        for key, v in res.models[k].state_dict().items():
            assert torch.equal(v, final.state_dict()[key]), key
    m, single = _resume_seed5_alone(tmp_path, scaler, dataset)
    _assert_close_weights("gdm", m, single, atol=1e-5)


def test_a_loop_state_resumes_with_the_member_engine(scaler, dataset, tmp_path):
    """latest/ written per member as before (the loop engine writes today's format) resumes
    with the member engine, and the other way round: the members end as the uninterrupted
    runs do (up to rounding)."""
    cfg = replace(KW, checkpoint_every=2, steps=4)
    args = dict(scaler=scaler, model_config=TINY, keep_history=True, progress=False)
    ref = train_ensemble("gdm", SEEDS, dataset, replace(cfg, strategy="loop"),
                         out_dir=tmp_path / "ref", **args)  # fmt: skip
    for first, then in (("loop", "members"), ("members", "loop")):
        run = tmp_path / first
        train_ensemble("gdm", SEEDS, dataset, replace(cfg, strategy=first, steps=2), out_dir=run,
                       **args)  # fmt: skip
        res = train_ensemble("gdm", SEEDS, dataset, replace(cfg, strategy=then), out_dir=run,
                             **args)  # fmt: skip
        assert res.resumed_from == 2 and res.strategy == then
        for a, b in zip(ref, res, strict=True):
            np.testing.assert_allclose(
                [r["loss"] for r in a.history[2:]], [r["loss"] for r in b.history], rtol=1e-5
            )
        for a, b in zip(ref.models, res.models, strict=True):
            _assert_close_weights("gdm", a, b, atol=1e-5)


def test_per_member_clipping_is_clip_grad_norm(scaler):
    torch.manual_seed(0)
    shapes = [(4, 3), (5,), ()]
    grads = [torch.randn(3, *s) for s in shapes]
    grads[0][1] *= 1e4  # member 1: a huge gradient
    ref = [[g[k].clone() for g in grads] for k in range(3)]
    stacked = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(stacked, grads, strict=True):
        p.grad = g
    norms = clip_grad_norms_(stacked, 1.0, members=3)
    for k in range(3):
        params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
        for p, g in zip(params, ref[k], strict=True):
            p.grad = g
        n = torch.nn.utils.clip_grad_norm_(params, 1.0)
        torch.testing.assert_close(norms[k], n)
        for p, g in zip(params, grads, strict=True):
            torch.testing.assert_close(g[k], p.grad)
    assert norms[1] > 1e3 and norms[0] < 10


def test_stacked_adam_equals_k_adams():
    torch.manual_seed(0)
    K, shapes = 3, [(4, 3), (2,)]
    singles = [[torch.nn.Parameter(torch.randn(s)) for s in shapes] for _ in range(K)]
    stacked = [torch.nn.Parameter(torch.stack([p[i].detach() for p in singles])) for i in range(2)]
    opts = [torch.optim.Adam(p, lr=1e-2) for p in singles]
    opt = torch.optim.Adam(stacked, lr=1e-2)
    for _ in range(5):
        grads = [torch.randn(K, *s) for s in shapes]
        for k in range(K):
            for i, p in enumerate(singles[k]):
                p.grad = grads[i][k].clone()
            opts[k].step()
        for i, p in enumerate(stacked):
            p.grad = grads[i].clone()
        opt.step()
    for k in range(K):
        for i in range(2):
            assert torch.equal(stacked[i][k], singles[k][i])
        # the member's slice of the stacked state is that Adam's state dict, and back
        sd, ref = member_opt_state(opt.state_dict(), k), opts[k].state_dict()
        for i in range(2):
            for name in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(sd["state"][i][name], ref["state"][i][name])
    back = stack_opt_states([opts[k].state_dict() for k in range(K)])
    for i in range(2):
        assert torch.equal(back["state"][i]["exp_avg"], opt.state_dict()["state"][i]["exp_avg"])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"seeds": [1, 1]}, "distinct"),
        ({"config": {"strategy": "threads"}}, "strategy"),
        ({"model": lambda: None, "scaler": None}, "model_config"),
        ({"config": {"strategy": "vmap"}}, "replaced by 'members'"),
        ({"config": {"strategy": "members", "compile": True}}, "compile is for strategy 'loop'"),
        ({"seeds": [1, 2], "member_logs": ["a.csv"]}, "one path per seed"),
    ],
)
def test_argument_errors(scaler, dataset, change, match):
    args = {"model": "gdm", "seeds": [1], "scaler": scaler, "model_config": TINY, **change}
    with pytest.raises(ValueError, match=match):
        config = replace(KW, **args.pop("config", {}))
        train_ensemble(args.pop("model"), args.pop("seeds"), dataset, config, progress=False,
                       **args)  # fmt: skip


def test_failed_member_stays_failed_on_resume(scaler, dataset, tmp_path):
    def nan(m):
        m.cell.decoder.node_heads.cont.weight[0, 0] = float("nan")

    factory = _poisoned(scaler, 5, nan)
    cfg = replace(KW, strategy="members", checkpoint_every=1, steps=2)
    train_ensemble(factory, SEEDS, dataset, cfg, out_dir=tmp_path, progress=False)
    # a save cut short between its two renames leaves only .latest_old
    (tmp_path / "latest").rename(tmp_path / ".latest_old")
    cfg = replace(cfg, steps=3)
    res = train_ensemble(factory, SEEDS, dataset, cfg, out_dir=tmp_path, progress=False)
    assert res.resumed_from == 2 and res.steps == 3
    assert isinstance(res[1].error, FloatingPointError) and res[1].failed_step == 1
    assert res[0].ok and res[2].ok and not (tmp_path / "seed5" / "final").exists()
    ref = train_ensemble(factory, SEEDS, dataset, cfg, out_dir=tmp_path / "r", progress=False)
    for k in (0, 2):
        for key, v in ref.models[k].state_dict().items():
            assert torch.equal(v, res.models[k].state_dict()[key]), key


def _mismatch(case, latest, earlier):
    """Turn the verified ensemble state ``latest`` (seeds 3, 5, 7 at step 2) into one that is
    not this ensemble's; ``earlier`` is the same ensemble's state at step 1."""
    if case == "extra member":
        shutil.copytree(latest / "seed5", latest / "seed9")
    elif case == "swapped members":
        (latest / "seed3").rename(latest / "tmp")
        (latest / "seed5").rename(latest / "seed3")
        (latest / "tmp").rename(latest / "seed5")
    elif case == "members at other steps":
        shutil.rmtree(latest / "seed5")
        shutil.copytree(earlier / "seed5", latest / "seed5")


MISMATCHES = {
    "extra member": (SEEDS, r"member folders \['seed9'\] that are not among its seeds"),
    "swapped members": (SEEDS, "its folder seed3 holds the state of seed 5"),
    "members at other steps": (
        SEEDS,
        r"members disagree on the step \(ensemble.json: 2, seed3: 2, seed5: 1, seed7: 2\)",
    ),
    "other K": (SEEDS[:2], r"K=3 members \(seeds \[3, 5, 7\]\), this ensemble has K=2"),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_a_state_that_is_not_this_ensembles_is_refused(scaler, dataset, tmp_path, case):
    """Resuming refuses, naming the folder, an intact ``latest/`` whose members are not the
    ensemble's (K, seeds, extra folders, steps), and leaves it where it is."""
    cfg = replace(KW, checkpoint_every=1, steps=2)
    args = dict(scaler=scaler, model_config=CONFIGS["vanilla-gwm"], progress=False)
    train_ensemble("vanilla-gwm", SEEDS, dataset, cfg, out_dir=tmp_path / "run", **args)
    train_ensemble("vanilla-gwm", SEEDS, dataset, replace(cfg, steps=1),
                   out_dir=tmp_path / "early", **args)  # fmt: skip
    latest = tmp_path / "run" / "latest"
    _mismatch(case, latest, tmp_path / "early" / "latest")
    seeds, message = MISMATCHES[case]
    with pytest.raises(CheckpointError, match=message) as err:
        train_ensemble("vanilla-gwm", seeds, dataset, replace(cfg, steps=3),
                       out_dir=tmp_path / "run", **args)  # fmt: skip
    assert f"cannot resume from {latest}:" in str(err.value)
    assert (latest / "ensemble.json").is_file()


def test_a_damaged_state_raises_checkpoint_errors_naming_it(scaler, dataset, tmp_path):
    """verify_ensemble_state (what graphwm quarantines on) names the damaged file; resuming
    raises the same CheckpointError (a bad ensemble.json included)."""
    args = dict(scaler=scaler, model_config=CONFIGS["vanilla-gwm"], progress=False)
    train_ensemble("vanilla-gwm", SEEDS, dataset, replace(KW, steps=1), out_dir=tmp_path, **args)
    latest = tmp_path / "latest"
    assert verify_ensemble_state(latest)["step"] == 1
    good = tmp_path / "good"
    shutil.copytree(latest, good)
    damages = {
        "ensemble.json": (r"ensemble.json is not valid JSON", lambda p: p.write_text('{"st')),
        "seed5/weights.safetensors": (
            r"seed5/weights.safetensors does not match the manifest",
            lambda p: p.write_bytes(p.read_bytes()[:100]),
        ),
        "seed7/trainer_state.pt": (r"seed7/trainer_state.pt is missing", lambda p: p.unlink()),
        "seed3": (r"lacks the folder of member seed3", shutil.rmtree),
    }
    for name, (message, damage) in damages.items():
        shutil.rmtree(latest)
        shutil.copytree(good, latest)
        damage(latest / name)
        with pytest.raises(CheckpointError, match=message):
            verify_ensemble_state(latest)
        with pytest.raises(CheckpointError, match=message):
            train_ensemble("vanilla-gwm", SEEDS, dataset, replace(KW, steps=1), out_dir=tmp_path,
                           **args)  # fmt: skip


def test_member_paths_for_a_pipeline(scaler, dataset, tmp_path):
    """One log and one final checkpoint per seed wherever the caller wants them."""
    jobs = [tmp_path / "jobs" / f"seed{s}" for s in SEEDS[:2]]
    res = train_ensemble(
        "vanilla-gwm", SEEDS[:2], dataset, replace(KW, steps=1), scaler=scaler,
        model_config=CONFIGS["vanilla-gwm"], out_dir=tmp_path / "ens",
        member_logs=[j / "log.csv" for j in jobs],
        member_finals=[j / "ckpt" / "final" for j in jobs], progress=False,
    )  # fmt: skip
    for k, j in enumerate(jobs):
        assert res[k].log_csv == j / "log.csv" and (j / "log.csv").is_file()
        assert res[k].final_checkpoint == j / "ckpt" / "final"
        m = load_checkpoint(j / "ckpt" / "final", model_name="vanilla-gwm")
        assert all(torch.equal(v, res.models[k].state_dict()[n]) for n, v in m.state_dict().items())
    assert (tmp_path / "ens" / "latest" / "ensemble.json").is_file()
    assert not (tmp_path / "ens" / f"seed{SEEDS[0]}").exists()


@dataclass
class _RewardConfig:
    scale: float = 1.0


class _MeanReward(WorldModel):
    """A model registered by another package, written against ``WorldModel`` only (not a
    ``MemberModel``): it learns the mean reward; only its training loss is needed here."""

    def __init__(self, schema, scaler, config) -> None:
        super().__init__(schema, scaler, config)
        self.reward = torch.nn.Parameter(torch.zeros(()))

    def training_loss(self, batch, generator=None):
        w = batch.step_mask.to(batch.reward.dtype)
        loss = ((batch.reward - self.reward) ** 2 * w).sum() / w.sum()
        return loss, {"reward": loss.detach()}

    def _observe_at(self, obs, actions, steps, generator):
        raise NotImplementedError

    def _latent_num_nodes(self, latent):
        raise NotImplementedError

    def start(self, obs, generator):
        raise NotImplementedError

    def state_from_latent(self, latent, num_samples, generator):
        raise NotImplementedError

    def _step(self, state, actions, generator):
        raise NotImplementedError


class _OldHooks(_MeanReward):
    """Written for the hooks ``WorldModel`` had before issue 36 (``supports_members`` and a
    ``member_loss``), without inheriting ``MemberModel``."""

    supports_members = True

    def member_loss(self, batch, noise, members):
        raise AssertionError("never called: the class did not opt in")


def test_models_opt_into_the_member_axis_by_their_class():
    """GDM, G-RSSM and the GWMs are ``MemberModel``s by construction; ``WorldModel`` itself
    carries no member hooks."""
    for name in CONFIGS:
        assert isinstance(make_model(name, SYNTHETIC_SCHEMA, None, **CONFIGS[name]), MemberModel)
    for hook in ("supports_members", "member_noise", "pad_member_noise", "member_loss"):
        assert not hasattr(WorldModel, hook), hook
    assert not isinstance(_MeanReward(SYNTHETIC_SCHEMA, None, _RewardConfig()), MemberModel)


def test_a_model_without_member_support_trains_with_the_loop(scaler, dataset):
    """The ensemble code asks the model's class (``isinstance(model, MemberModel)``): a model
    that does not opt in trains member by member under "auto", and "members" is refused
    naming why; one written for the old hooks is told how to opt in."""

    def factory():
        return _MeanReward(SYNTHETIC_SCHEMA, scaler, _RewardConfig())

    res = train_ensemble(factory, SEEDS[:2], dataset, KW, keep_history=True, progress=False)
    assert res.strategy == "loop" and all(m.ok for m in res)
    assert all(m.reward.item() != 0.0 for m in res.models)  # trained
    with pytest.raises(ValueError, match="does not inherit gdm_models.member_layers.MemberModel"):
        train_ensemble(factory, SEEDS[:2], dataset, replace(KW, strategy="members"), progress=False)
    with pytest.raises(TypeError, match="MemberModel"):
        MemberEngine([factory()], lr=1e-3, clip=1.0, autocast=torch.autocast("cpu", enabled=False))

    def old():
        return _OldHooks(SYNTHETIC_SCHEMA, scaler, _RewardConfig())

    with pytest.warns(UserWarning, match="inherit MemberModel"):
        res = train_ensemble(old, SEEDS[:2], dataset, KW, progress=False)
    assert res.strategy == "loop" and all(m.ok for m in res)


@pytest.mark.exact_float
def test_captured_loop_members_are_bit_identical_to_captured_single_runs(scaler, dataset):
    """One loop: the loop engine's static step for K members is train(capture=True) of each
    seed, bit for bit (on the CPU the static step runs eagerly)."""
    cfg = replace(KW, batch_size=3, strategy="loop", capture=True)
    res = train_ensemble("gdm", SEEDS, dataset, cfg, scaler=scaler, model_config=TINY,
                         keep_history=True, progress=False)  # fmt: skip
    for k, seed in enumerate(SEEDS):
        single, sres = _single("gdm", seed, scaler, dataset, capture=True, batch_size=3)
        assert res[k].history == sres.history
        for key, v in single.state_dict().items():
            assert torch.equal(v, res.models[k].state_dict()[key]), key
