"""Issue 38, class 5: input errors outside the preset checks exit 2 with one line (no
traceback, no --debug hint), before any work; a command with nothing to do says so."""

from __future__ import annotations

import pytest

from graphwm.cli import main


def _run(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's usage errors
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


def test_an_out_path_component_over_255_bytes_is_a_usage_error(capsys, tmp_path):
    long = str(tmp_path / ("x" * 300) / "run")
    code, err = _run(capsys, "collect", "--preset", "tiny", "--out", long)
    assert code == 2 and "at most 255" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_a_path_too_long_for_the_store_is_a_usage_error(capsys, tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 20)
    code, err = _run(capsys, "collect", "--preset", "tiny", "--out", str(deep))
    assert code == 2 and "the run store needs it under" in err


def test_demo_refuses_a_size_one_env_cannot_take(capsys, tmp_path):
    code, err = _run(capsys, "demo", "--num-nodes", "2500", "--out", str(tmp_path / "d"))
    assert code == 2 and "--num-nodes" in err and "takes at most" in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("command", ["search", "downstream"])
def test_a_stage_without_its_preset_section_says_there_is_nothing_to_do(capsys, tmp_path, command):
    import re
    from pathlib import Path

    import graphwm

    text = (Path(graphwm.__file__).parent / "presets" / "tiny.toml").read_text()
    # the tiny preset without its [search.grid.*] and [downstream] tables (the last ones)
    text = re.split(r"(?m)^\[search\.grid", text)[0]
    assert "[downstream]" not in text and "[evaluate]" in text
    raw = tmp_path / "p.toml"
    raw.write_text(text)
    code, err = _run(capsys, command, "--preset", str(raw), "--out", str(tmp_path / "run"))
    assert code == 2 and "nothing to do" in err and f"graphwm {command}" in err
    assert not (tmp_path / "run" / "run.json").exists()  # no work, nothing written
