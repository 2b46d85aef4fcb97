"""Typed presets (issue 12): every bad value is refused before any work, naming the key."""

from __future__ import annotations

import copy

import pytest

from graphwm.cli import main
from graphwm.config import PRESET_NAMES, Preset, PresetError
from graphwm.pipeline import load_preset, preset_dict, reproduce


def _set(preset: dict, key: str, value) -> dict:
    preset = copy.deepcopy(preset)
    *parents, leaf = key.split(".")
    table = preset
    for p in parents:
        table = table[p]
    if value is _DELETE:
        del table[leaf]
    else:
        table[leaf] = value
    return preset


_DELETE = object()

BAD_VALUES = [
    ("collect.train_episodes", 0, r"'collect\.train_episodes': must be an integer >= 1, got 0"),
    ("train.steps", 0, r"'train\.steps': must be an integer >= 1, got 0"),
    ("train.steps", -3, r"'train\.steps': must be an integer >= 1, got -3"),
    ("train.steps", 2.5, r"'train\.steps': must be an integer, got 2\.5"),
    ("seeds", [0, 1.5], r"'seeds\[1\]': must be an integer, got 1\.5"),
    ("seeds", [0, 0], r"'seeds': must not repeat a value"),
    ("evaluate.num_samples", 1, r"'evaluate\.num_samples': must be an integer >= 2, got 1"),
    ("multi_step.horizon", 0, r"'multi_step\.horizon': must be an integer >= 1"),
    ("collect.test_sizes", [], r"'collect\.test_sizes': must be a non-empty list"),
    ("envs", ["SAR", "XYZ"], r"'envs\[1\]' \('XYZ'\): unknown env 'XYZ'; choose from"),
    ("models", ["gdm", "nope"], r"'models\[1\]' \('nope'\): no hyperparameters for model 'nope'"),
    ("executor", "slurm", r"'executor': must be one of \['local', 'ray'\]"),
    ("train.precision", "fp8", r"'train\.precision': must be one of \['fp32', 'bf16'\]"),
    ("train.compile", "yes", r"'train\.compile': must be true or false"),
    ("train.train_overrides", {"lr": -1.0}, r"'train\.train_overrides\.lr': must lie in"),
    ("train.train_overrides", {"momentum": 0.9}, r"'train\.train_overrides\.momentum' is unknown"),
    ("evaluate.alpha", 1.5, r"'evaluate\.alpha': must lie in \(0\.0, 1\.0\)"),
    ("collect.train_episode", 3, r"'collect\.train_episode' is unknown"),
    ("train.epochs", 5, r"'train': give exactly one of 'steps' and 'epochs'"),
    ("evaluate.num_samples", _DELETE, r"'evaluate\.num_samples' is missing"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_bad_preset_value_is_refused_before_collect(tmp_path, key, value, message):
    bad = _set(preset_dict("tiny"), key, value)
    with pytest.raises(PresetError, match=message):
        reproduce(bad, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # nothing was collected (or even created)


def test_shipped_presets_parse_and_round_trip():
    for name in PRESET_NAMES:
        preset = Preset.parse(preset_dict(name))
        assert Preset.parse(preset.to_dict()) == preset
    tiny = Preset.parse(preset_dict("tiny"))
    # defaults live in one place (graphwm.config) and are filled in at parse time
    assert tiny.train.precision == "fp32" and tiny.train.compile is False
    assert tiny.fit.transitions_per_episode == 4 and tiny.collect.rgc_max_test_size == 200
    assert tiny.models_of("SAR") == ("gdm", "vanilla-gwm", "gdm:no-h-plus")
    assert tiny.models_of("RGC") == ("gdm", "vanilla-gwm")


def test_medium_preset_is_the_paper_setting_on_od_and_sar():
    """Issue 10's medium preset: paper-size training data for OD and SAR, the four models at
    the paper's hyperparameters (no overrides), single-step GDD at N = 20 and 50, on a GPU."""
    medium = Preset.parse(preset_dict("medium"))
    paper = Preset.parse(preset_dict("paper"))
    assert medium.envs == ("OD", "SAR") and medium.device == "cuda"
    assert set(medium.models) == set(paper.models) and medium.ablations == ()
    assert medium.collect.train_sizes == paper.collect.train_sizes
    assert medium.collect.train_episodes == paper.collect.train_episodes
    assert medium.train.model_overrides == {} and medium.train.train_overrides == {}
    assert medium.test_sizes("OD") == (20, 50) and medium.multi_step is None
    assert medium.evaluate.num_samples == paper.evaluate.num_samples


def test_cli_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    toml = tmp_path / "bad.toml"
    raw = preset_dict("tiny")
    raw["collect"]["train_episodes"] = 0
    toml.write_text(_to_toml(raw))
    code = main(["reproduce", "--preset", str(toml), "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [  # the file, the key, what is allowed, the value
        f"graphwm: error: {toml}: preset key 'collect.train_episodes': must be an integer >= 1, "
        "got 0"
    ]
    assert "Traceback" not in err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(PresetError):  # --debug: the exception itself, with its traceback
        main(["reproduce", "--preset", str(toml), "--out", str(tmp_path / "run"), "--debug"])
    with pytest.raises(SystemExit) as exit_:
        main(["reproduce", "--precision", "fp16"])  # argparse's own usage error
    assert exit_.value.code == 2


def _to_toml(raw: dict) -> str:
    """A minimal TOML writer for presets (strings, numbers, bools, lists, nested tables)."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)

    lines: list[str] = []

    def table(prefix: str, t: dict) -> None:
        scalars = {k: v for k, v in t.items() if not isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f'"{k}" = {value(v)}' for k, v in scalars.items())
        for k, v in t.items():
            if isinstance(v, dict):
                table(f'{prefix}."{k}"' if prefix else f'"{k}"', v)

    table("", raw)
    return "\n".join(lines) + "\n"


def test_every_default_is_a_dataclass_field():
    """Defaults live in the config dataclasses; the preset's [train] section and the PPO
    settings read them from there (changing a field default changes all of them): the
    trainer's from gdm_models.training.TrainConfig."""
    from gdm_models.training import TrainConfig

    from graphwm.config import TrainSection
    from graphwm.config_values import defaults
    from graphwm.downstream.section import DEFAULT_PPO, PpoSettings

    assert DEFAULT_PPO == {k: v for k, v in defaults(PpoSettings).items() if v is not None}
    assert DEFAULT_PPO == {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 3e-4}
    trainer = TrainConfig()
    for name in ("precision", "compile", "checkpoint_every", "log_every", "ensemble"):
        assert defaults(TrainSection)[name] == getattr(trainer, name)


def test_records_are_read_by_the_preset_parser_naming_file_and_field(tmp_path):
    from graphwm.store.records import ResultsFormatError, TrainRecord, parse_record

    good = {
        "kind": "train",
        "env": "SAR",
        "model": "gdm",
        "seed": 0,
        "steps": 4,
        "checkpoint": "train/SAR/gdm/seed0-x/ckpt/final",
        "checkpoint_digest": "ab",
    }
    path = tmp_path / "jobs" / "train-x.json"
    record = parse_record(good, path)
    assert isinstance(record, TrainRecord) and record.resumed_from == 0
    with pytest.raises(
        ResultsFormatError, match=r"train-x\.json: 'seed' must be an integer, got '0'"
    ):
        parse_record({**good, "seed": "0"}, path)
    with pytest.raises(
        ResultsFormatError, match=r"train-x\.json: lacks required key\(s\) \['steps'\]"
    ):
        parse_record({k: v for k, v in good.items() if k != "steps"}, path)
    with pytest.raises(ResultsFormatError, match=r"'last_terms\.loss' must be a number"):
        parse_record({**good, "last_terms": {"loss": "low"}}, path)


def _count_checks(monkeypatch) -> list:
    from graphwm import checks

    calls: list = []
    real = checks.check_preset

    def counted(preset, *listed):
        calls.append(preset)
        real(preset, *listed)

    monkeypatch.setattr(checks, "check_preset", counted)
    return calls


def test_a_checked_preset_is_passed_down_not_checked_again(monkeypatch):
    from graphwm.checks import CheckedPreset, parse_checked
    from graphwm.pipeline import evaluation_jobs

    raw = preset_dict("tiny")
    calls = _count_checks(monkeypatch)
    jobs = evaluation_jobs(raw)  # builds every fit, training and evaluation job
    assert len(jobs) > 1 and len(calls) == 1
    checked = parse_checked(raw)
    assert isinstance(checked, CheckedPreset) and parse_checked(checked) is checked
    assert load_preset("tiny") == checked  # the public entry: parsed and checked once
    import graphwm

    assert graphwm.load_preset("tiny") == checked
    assert checked.to_dict() == Preset.parse(raw).to_dict()
    # a plain Preset is still checked: a model name gdm_models cannot build is refused
    with pytest.raises(PresetError, match=r"'models\[1\]' \('nope'\)"):
        parse_checked(Preset.parse(_set(raw, "models", ["gdm", "nope"])))


def test_a_cli_command_checks_its_preset_once(tmp_path, monkeypatch):
    calls = _count_checks(monkeypatch)
    argv = ["collect", "--preset", "tiny", "--envs", "CF", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0
    assert len(calls) == 1 and list((tmp_path / "data" / "CF").glob("*.npz"))


def test_cli_reproduce_prints_the_report_it_built_without_building_it_again(
    tmp_path, capsys, monkeypatch
):
    import graphwm.pipeline
    import graphwm.report.build
    from graphwm.report.build import ReportPaths

    built = ReportPaths(tmp_path / "report", tmp_path / "report" / "report.md", main_table="| T |")
    seen = []
    monkeypatch.setattr(
        graphwm.pipeline, "reproduce_report", lambda preset, out, **kw: seen.append(out) or built
    )

    def no_second_build(*args, **kwargs):
        raise AssertionError("the CLI built the report a second time")

    monkeypatch.setattr(graphwm.report.build, "build_report", no_second_build)
    assert main(["reproduce", "--preset", "tiny", "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert seen == [tmp_path / "run"] and "| T |" in capsys.readouterr().out


def test_a_training_job_holds_its_train_config():
    """A TrainJob holds the gdm_models.TrainConfig it trains with (the model's preset under the
    preset's overrides, length, seed, device, ...) and its key is derived from it: the
    weight-changing fields are keyed, log_every / checkpoint_every / threads are not."""
    from gdm_models.training import TrainConfig

    from graphwm import jobs
    from graphwm.checks import parse_checked
    from graphwm.envs import resolved_configs
    from graphwm.pipeline import preset_dict

    preset = parse_checked(preset_dict("tiny"))
    job = jobs.training_jobs(preset)[0]
    assert isinstance(job.config, TrainConfig)
    base = job.model.split(":", 1)[0]
    _, trainer = resolved_configs(
        job.model, job.env, preset.train.model_overrides.get(base), preset.train.train_overrides
    )
    assert job.describe()["trainer"] == trainer
    c = job.config
    assert (c.batch_size, c.seq_len, c.lr) == (
        trainer["batch_size"],
        trainer["seq_len"],
        trainer["lr"],
    )
    assert (c.steps, c.seed, c.device) == (preset.train.steps, preset.seeds[0], preset.device)
    for unkeyed in ({"log_every": 7}, {"checkpoint_every": 3}, {"threads": 2}):
        assert job.with_config(**unkeyed).key == job.key
    keyed_changes = (
        {"lr": c.lr * 2}, {"seed": c.seed + 1}, {"precision": "bf16"}, {"steps": 9},
        {"grad_clip": 1.0}, {"capture": False}, {"keep_every": 1},
    )  # fmt: skip
    for keyed in keyed_changes:
        assert job.with_config(**keyed).key != job.key
