"""The SWE env's plain-text tool protocol: parsing, replacing, rendering (no Docker needed)."""

from __future__ import annotations

import subprocess

import pytest

from creditgym.envs.swe_tools import (
    Action,
    ToolParseError,
    apply_patch_command,
    apply_replace,
    format_bash,
    format_view,
    parse_action,
)


def test_bash_action_takes_the_lines_below_and_only_the_last_action_counts() -> None:
    text = "I will look.\nACTION: view a.py\nno, first list files\nACTION: bash\nls -la\ngrep -n foo *.py\n"
    assert parse_action(text) == Action("bash", command="ls -la\ngrep -n foo *.py")
    assert parse_action("ACTION: bash  pytest -q").command == "pytest -q"


def test_view_with_and_without_a_line_range() -> None:
    assert parse_action("ACTION: view src/app.py") == Action("view", path="src/app.py")
    assert parse_action("ACTION: view src/app.py 10-40").lines == (10, 40)
    with pytest.raises(ToolParseError, match="bad line range '40-10'"):
        parse_action("ACTION: view src/app.py 40-10")


def test_replace_block_and_submit() -> None:
    text = "fix\nACTION: replace lib/x.py\n<<<<<<< SEARCH\n    return a-1\n=======\n    return a\n>>>>>>> REPLACE"
    action = parse_action(text)
    assert (action.kind, action.path, action.search, action.replace) == (
        "replace",
        "lib/x.py",
        "    return a-1\n",
        "    return a\n",
    )
    assert parse_action("done\nACTION: submit").kind == "submit"
    assert parse_action("ACTION: Submit").kind == "submit"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("just thinking out loud", "no action found"),
        ("ACTION: run ls", "unknown action 'run'"),
        ("ACTION: bash\n   \n", "needs a command"),
        ("ACTION: view", "needs a file path"),
        ("ACTION: replace a.py\nold -> new", "needs a block below it"),
        ("ACTION: replace a.py\n<<<<<<< SEARCH\n=======\nx\n>>>>>>> REPLACE", "SEARCH part .* is empty"),
    ],
)
def test_malformed_turns_get_a_message_that_says_how_to_fix_them(text: str, message: str) -> None:
    with pytest.raises(ToolParseError, match=message):
        parse_action(text)


def test_apply_replace_needs_exactly_one_occurrence() -> None:
    action = Action("replace", path="m.py", search="x = 1\n", replace="x = 2\n")
    assert apply_replace("a\nx = 1\nb\n", action) == "a\nx = 2\nb\n"
    with pytest.raises(ToolParseError, match=r"is not in m\.py"):
        apply_replace("a\n", action)
    with pytest.raises(ToolParseError, match=r"occurs 2 times in m\.py"):
        apply_replace("x = 1\nx = 1\n", action)


def test_observations_are_plain_and_bounded() -> None:
    assert format_bash(0, "hello\n", False, 60) == "hello\n[exit code 0]"
    assert format_bash(None, "", True, 5) == "[timed out after 5s; the command was killed]"
    full = format_bash(None, "wrote", False, 5, disk="2g")
    assert (
        full == "wrote\n[disk limit of 2g exceeded: the command was killed; delete files before writing more]"
    )
    assert "killed" not in format_bash(0, "", False, 5, disk="2g")  # it ended before the watchdog saw it
    text = "\n".join(f"line {i}" for i in range(1, 501))
    shown = format_view("big.py", text, None)
    assert "big.py (lines 1-200 of 500)" in shown and "lines 201-500 not shown" in shown
    assert "  300  line 300" in format_view("big.py", text, (300, 301))
    assert "past the end" in format_view("big.py", text, (900, 901))


def test_apply_patch_command_applies_a_patch_in_bash(tmp_path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "a.txt").write_text("one\ntwo\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+CREDITGYM_PATCH_EOF\n"
    cmd = apply_patch_command(patch)
    assert "CREDITGYM_PATCH_EOF_" in cmd  # the here-document marker never collides with the patch
    subprocess.run(["bash", "-c", cmd], cwd=repo, check=True, capture_output=True)
    assert (repo / "a.txt").read_text() == "one\nCREDITGYM_PATCH_EOF\n"


def test_env_splits_tasks_and_answers_a_bad_turn_without_a_sandbox() -> None:
    import numpy as np

    from creditgym.envs.core import Source
    from creditgym.envs.swe import SWEEnv

    train, test = SWEEnv(split="train"), SWEEnv(split="test")
    ids = {t.instance_id for t in train.tasks} | {t.instance_id for t in test.tasks}
    assert len(ids) == len(train.tasks) + len(test.tasks) == len(SWEEnv().tasks) and test.tasks
    with pytest.raises(ValueError, match="split must be"):
        SWEEnv(split="dev")
    env = SWEEnv(max_new_tokens=64)
    env.reset(seed=0)
    ids = env.tokenizer("hmm, not sure", add_special_tokens=False)["input_ids"] + [env.end_of_turn_id]
    _, reward, term, trunc, info = env.step(np.asarray(ids))
    assert (reward, term, trunc) == (0.0, False, False) and env._sandbox is None
    text = env.tokenizer.decode(env.ledger.token_id[env.ledger.source == Source.ENV].tolist())
    assert text == f"\n<|im_start|>user\n{info['observation']}<|im_end|>\n<|im_start|>assistant\n"
    assert env.render() is None
