"""Every bad preset value, override, device, model name, size and CLI argument is refused before
any work, naming the key (exit code 2 on the command line)."""

from __future__ import annotations

import math

import pytest
import torch

from graphwm.cli import main
from graphwm.config import PresetError
from graphwm.pipeline import preset_dict, reproduce

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
NO_MPS = pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")

BAD = [
    ("device", "foo", r"'device': must be 'cpu', 'cuda', 'cuda:<index>' or 'mps'"),
    ("device", "tpu", r"'device': must be 'cpu'"),
    pytest.param("device", "cuda", r"'device': 'cuda' is not available", marks=NO_CUDA),
    ("device", "cuda:99", r"'device': 'cuda:99' is not available on this machine \(it has \d+"),
    pytest.param("device", "mps", r"'device': 'mps' is not available", marks=NO_MPS),
    ("train.model_overrides.gdm.embed_dim", -8, r"'train\.model_overrides\.gdm\.embed_dim'"),
    ("train.model_overrides.gdm.bogus", 1, r"'train\.model_overrides\.gdm\.bogus' is unknown"),
    (
        "train.model_overrides.gdm.embed_dim",
        "big",
        r"'train\.model_overrides\.gdm\.embed_dim': must be an integer, got 'big'",
    ),
    (
        "train.model_overrides.vanila-gwm",
        {"hidden_dim": 8},
        r"'train\.model_overrides\.vanila-gwm' is unknown",
    ),
    ("search.grid.gdm.bogus", [1, 2], r"'search\.grid\.gdm\.bogus' is unknown"),
    ("models", ["gdm:foo"], r"'models\[0\]' \('gdm:foo'\): unknown GDM ablation 'foo'"),
    ("ablations", ["gdm:no-such-ablation"], r"'ablations\[0\]'.*unknown GDM ablation"),
    (
        "train.train_overrides.lr",
        math.inf,
        r"'train\.train_overrides\.lr': must be a finite number",
    ),
    ("evaluate.alpha", math.nan, r"'evaluate\.alpha': must be a finite number, got nan"),
    (
        "collect.test_sizes",
        [6000],
        r"'collect\.test_sizes\[0\]': must be an integer >= 5 and <= 5000",
    ),
    (
        "collect.train_sizes",
        [10_000_000],
        r"'collect\.train_sizes\[0\]': must be an integer >= 5 and <= 500",
    ),
    (
        "collect.train_episodes",
        20_000,
        r"'collect\.train_episodes': must be an integer >= 1 and <= 10000",
    ),
    ("multi_step.size", 3, r"'multi_step\.size': must be an integer >= 5"),
    ("multi_step.size", 1_000_000, r"'multi_step\.size': must be an integer >= 5 and <= 5000"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD)
def test_bad_value_is_refused_before_any_work(tmp_path, preset_with, key, value, message):
    bad = preset_with(preset_dict("tiny"), key, value)
    with pytest.raises(PresetError, match=message):
        reproduce(bad, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def _toml(tmp_path, text: str):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reproduce", "--preset", "tiny", "--out", ""], "must be a non-empty path"),
        (["demo", "--seeds", "-1"], "must be an integer >= 1, got -1"),
        (["estimate-cost", "--steps", "-1"], "must be an integer >= 1, got -1"),
        (["reproduce", "--preset", "tiny", "--workers", "-2"], "must be an integer >= 0"),
    ],
)
def test_cli_refuses_bad_arguments_with_exit_code_2(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written into the current directory


@NO_CUDA
def test_cli_device_cuda_without_cuda_exits_2_before_work(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["reproduce", "--preset", "tiny", "--device", "cuda", "--out", str(out), "--quiet"])
    assert code == 2 and not out.exists()
    assert "preset key 'device': 'cuda' is not available" in capsys.readouterr().err


def test_preset_file_problems_are_said_as_such(tmp_path, capsys):
    missing = tmp_path / "nope.toml"
    assert main(["reproduce", "--preset", str(missing), "--out", str(tmp_path / "r")]) == 2
    assert f"preset file {missing} does not exist" in capsys.readouterr().err
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00name = 1")
    assert main(["reproduce", "--preset", str(binary), "--out", str(tmp_path / "r")]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    assert main(["reproduce", "--preset", "tinyy", "--out", str(tmp_path / "r")]) == 2
    assert "unknown preset 'tinyy'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_report_on_a_regular_file_says_so(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["report", str(f)]) == 2
    assert "is not a directory" in capsys.readouterr().err
