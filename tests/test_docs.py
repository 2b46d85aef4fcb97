"""The Python example of docs/quickstart.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

QUICKSTART = Path(__file__).resolve().parents[1] / "docs" / "quickstart.md"


def test_quickstart_example_runs(capsys):
    text = QUICKSTART.read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    exec(compile(code, str(QUICKSTART), "exec"), {"__name__": "quickstart"})
    assert "GDD = " in capsys.readouterr().out
