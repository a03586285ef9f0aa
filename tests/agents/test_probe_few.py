"""What ``creditgym probe`` tells a user about its own inputs: which models ``--model`` takes, and a probe of too
few prompts to support its figures."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from creditgym.agents.probe.nulls import MIN_PROMPTS, few_prompts_note
from creditgym.agents.probe.report import probe_markdown
from creditgym.cli import main


def test_probe_help_names_the_named_models(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    model = text[text.index("--model MODEL ") :].split("--prompts")[0]
    assert "creditgym/tiny" in model and "smollm2-135m" in model and "creditgym models" in model, model


def test_a_probe_of_fewer_prompts_than_the_minimum_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = ["--prompts", "2", "--group", "2", "--k", "2", "--bootstrap", "50", "--target", "none"]
    args = ["--env", "creditgym/Math-v0", "--every", "4", "--credit", "grpo", *small]
    assert main(["probe", "--out", str(tmp_path), *args]) == 0
    note = few_prompts_note(2, 4)
    assert note is not None and "4 responses from 2 prompt(s), fewer than 4" in note
    assert note in capsys.readouterr().out and note in (tmp_path / "probe.md").read_text()
    assert len(note.splitlines()) == 1
    # from MIN_PROMPTS prompts on, the same table carries no such line
    result = json.loads((tmp_path / "probe.json").read_text())
    enough = copy.deepcopy(result)
    enough["prompts"] = enough["config"]["prompts"] = MIN_PROMPTS
    assert few_prompts_note(MIN_PROMPTS, 16) is None and "Too few to rely on" not in probe_markdown(enough)
