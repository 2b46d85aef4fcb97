"""Issue 30: every number a preset holds has a range this machine can honour, checked with the
other preset checks before any work; what would be accepted and silently do nothing is
refused; misleading messages are worded."""

from __future__ import annotations

import copy

import pytest

from graphwm.checks import parse_checked
from graphwm.cli import main
from graphwm.config import PresetError, apply_overrides, read_preset
from graphwm.config_values import MAX_INT, MAX_SEED
from graphwm.work_bounds import memory_bytes, sample_bytes


@pytest.fixture(scope="module")
def tiny() -> dict:
    return read_preset("tiny")


def _refused(raw: dict, match: str) -> None:
    with pytest.raises(PresetError, match=match):
        parse_checked(raw)


def _with(raw: dict, **changes) -> dict:
    out = copy.deepcopy(raw)
    for key, value in changes.items():
        *parents, leaf = key.split("__")
        table = out
        for p in parents:
            table = table.setdefault(p, {})
        table[leaf] = value
    return out


# ---------------------------------------------------------------------------------------------
# numbers: the range table
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [10**30, 2**64, MAX_SEED + 1])
def test_seeds_stop_where_every_generator_of_the_run_does(tiny, seed):
    _refused(_with(tiny, seeds=[seed]), rf"'seeds\[0\]'.*<= {MAX_SEED}")
    _refused(_with(tiny, fit__seed=seed), rf"'fit.seed'.*<= {MAX_SEED}")
    parse_checked(_with(tiny, seeds=[MAX_SEED - 100]))


def test_every_integer_without_its_own_bound_has_the_table_s(tiny):
    _refused(_with(tiny, evaluate__num_samples=10**30), rf"<= {MAX_INT}")
    _refused(_with(tiny, train__checkpoint_every=2**40), rf"'train.checkpoint_every'.*{MAX_INT}")
    overrides = {"gdm": {"hidden_dim": 10**30}}
    _refused(_with(tiny, train__model_overrides=overrides), rf"hidden_dim'.*<= {MAX_INT}")


def test_sizes_are_bounded_by_this_machine_s_memory(tiny):
    kappa = 10**8
    assert sample_bytes(kappa, 7) > memory_bytes() // 2
    _refused(_with(tiny, evaluate__num_samples=kappa), "'evaluate.num_samples'.*memory")
    overrides = {"gdm": {"hidden_dim": 10**6}}
    _refused(_with(tiny, train__model_overrides=overrides), "parameters.*memory")
    grid = {"gdm": {"hidden_dim": [16, 10**6]}}
    _refused(_with(tiny, search={"grid": grid}), r"search.grid.gdm.*parameters.*memory")
    _refused(_with(tiny, downstream__policy_hidden_dim=10**30), r"<= 65536")
    _refused(_with(tiny, downstream__policy_hidden_dim=60000), "policy_hidden_dim.*memory")
    parse_checked(_with(tiny, train__model_overrides={"gdm": {"hidden_dim": 32}}))


def test_downstream_seeds_and_ppo_settings_sb3_would_fail_on(tiny):
    _refused(_with(tiny, downstream__eval_seed=2**64), rf"eval_seed.*<= {MAX_SEED}")
    _refused(_with(tiny, downstream__eval_seed=MAX_SEED), "plus episodes - 1")
    one = _with(tiny, downstream__dream_envs=1, downstream__ppo={"n_steps": 1})
    _refused(one, r"ppo.n_steps.*>= 2")
    _refused(_with(tiny, downstream__ppo={"learning_rate": 1e30}), r"learning_rate.*\(0.0, 1.0\]")
    _refused(_with(tiny, downstream__ppo={"batch_size": 1}), r"batch_size.*>= 2")
    _refused(_with(tiny, seeds=[MAX_SEED]), r"dream_envs - 1")


# ---------------------------------------------------------------------------------------------
# accepted silently before
# ---------------------------------------------------------------------------------------------
def test_what_would_silently_do_nothing_is_refused(tiny):
    _refused(_with(tiny, downstream__envs=["SAR", "SAR"]), "must not repeat")
    what = r"'ablation_envs\[0\]': must be one of .*never.*got 'OD'"
    _refused(_with(tiny, ablation_envs=["OD"]), what)
    _refused(_with(tiny, ablations=["vanilla-gwm"]), "is a base model, not an ablation")
    _refused(_with(tiny, collect__rgc_max_test_size=6), "no size is left for RGC")


def test_models_option_leaves_out_the_ablations_of_models_left_out():
    from graphwm import cli

    args = cli._build_parser().parse_args(["train", "--preset", "tiny", "--models", "vanilla-gwm"])
    assert cli._preset(args).ablations == ()
    args = cli._build_parser().parse_args(["train", "--preset", "tiny", "--models", "gdm"])
    p = cli._preset(args)
    assert p.models == ("gdm",) and p.ablations == ("gdm:no-h-plus",)


# ---------------------------------------------------------------------------------------------
# misleading messages
# ---------------------------------------------------------------------------------------------
def test_a_utf8_bom_is_read_and_deep_nesting_is_worded(tmp_path):
    bom = tmp_path / "bom.toml"
    from importlib import resources

    source = resources.files("graphwm.presets").joinpath("tiny.toml").read_text()
    bom.write_bytes(b"\xef\xbb\xbf" + source.encode())
    assert read_preset(bom)["name"] == "tiny"
    deep = tmp_path / "deep.toml"
    deep.write_text("envs = " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(PresetError, match="nests arrays or tables too deeply"):
        read_preset(deep)
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(PresetError, match="nests"):
        apply_overrides({"a": nested}, {})


def test_an_override_into_a_key_that_is_no_table_is_worded(tiny, capsys, tmp_path):
    with pytest.raises(PresetError, match=r"'train': must be a table \(to set 'train.precision'\)"):
        apply_overrides({**tiny, "train": 5}, {"train.precision": "bf16"})
    preset = tmp_path / "p.toml"
    preset.write_text('name = "x"\ntrain = 5\nablations = 5\n')
    assert main(["train", "--preset", str(preset), "--precision", "bf16", "--out", "r"]) == 2
    assert "'train': must be a table" in capsys.readouterr().err
    assert main(["estimate-cost", "--preset", str(preset), "--models", "gdm"]) == 2
    err = capsys.readouterr().err
    assert "TypeError" not in err and "preset key" in err


def test_out_naming_a_file_and_an_empty_preset_are_worded(tmp_path, capsys):
    afile = tmp_path / "f"
    afile.write_text("x")
    for out in (str(afile), "/dev/null"):
        with pytest.raises(SystemExit):
            main(["train", "--preset", "tiny", "--out", out])
        assert "exists and is not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--preset", "", "--out", str(tmp_path / "r")])
    assert "must name a preset" in capsys.readouterr().err
    with pytest.raises(PresetError, match="the preset is empty"):
        read_preset("")
