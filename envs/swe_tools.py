"""The plain-text tool protocol of ``creditgym/SWEBench-v0``: what a turn may ask for, and how it is parsed.

A policy turn is free text that ends with exactly one action. The action starts at the last line that begins with
``ACTION:``; everything after that line is the action's body. No JSON, no special tokens: any chat model (and the
tiny bundled one) can write it, and a turn that does not parse gets a short format-error observation instead of
ending the episode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ActionKind = Literal["bash", "view", "replace", "submit"]
ACTIONS: tuple[str, ...] = ("bash", "view", "replace", "submit")

PROTOCOL = """\
You are fixing an issue in the Python repository at {workdir}. Work in turns. End every turn with exactly one \
action, written last in your message, in one of these forms:

ACTION: bash
<one shell command, run in {workdir}; it is killed after {timeout:g} seconds>

ACTION: view <path> [<first line>-<last line>]

ACTION: replace <path>
<<<<<<< SEARCH
<the exact lines to find; they must occur exactly once in the file>
=======
<the lines to put in their place>
>>>>>>> REPLACE

ACTION: submit

After each action you get its output. Paths are relative to {workdir}. Submit when your change fixes the issue: \
the repository's tests are then run on your diff."""

_ACTION_LINE = re.compile(r"^ACTION:[ \t]*(\S*)[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_BLOCK = re.compile(
    r"^<<<<<<< SEARCH[ \t]*\n(.*?)^=======[ \t]*\n(.*?)^>>>>>>> REPLACE[ \t]*$", re.MULTILINE | re.DOTALL
)


class ToolParseError(ValueError):
    """A turn whose action cannot be read; the message is what the policy is told."""


@dataclass(frozen=True)
class Action:
    """One parsed tool call.

    Attributes:
        kind: ``bash``, ``view``, ``replace`` or ``submit``.
        command: The shell command (``bash``).
        path: The file (``view``, ``replace``), as written: relative to the repository root.
        lines: 1-based inclusive line range to show (``view``), or ``None`` for the start of the file.
        search: Text to find (``replace``).
        replace: Text to put in its place (``replace``).
    """

    kind: ActionKind
    command: str = ""
    path: str = ""
    lines: tuple[int, int] | None = None
    search: str = ""
    replace: str = ""


def parse_action(text: str) -> Action:
    """Read the action that ends a turn.

    Raises:
        ToolParseError: no ``ACTION:`` line, an unknown action, or a malformed body; the message says which and
            how to write it.
    """
    matches = list(_ACTION_LINE.finditer(text))
    if not matches:
        raise ToolParseError(
            "no action found: end your turn with a line `ACTION: bash`, `ACTION: view <path>`, "
            "`ACTION: replace <path>` or `ACTION: submit` (and the action's body below it)"
        )
    last = matches[-1]
    kind, arg, body = last.group(1).lower(), last.group(2), text[last.end() :].strip("\n")
    if kind not in ACTIONS:
        raise ToolParseError(f"unknown action {last.group(1)!r}; the actions are {', '.join(ACTIONS)}")
    if kind == "submit":
        return Action("submit")
    if kind == "bash":
        command = "\n".join(part for part in (arg, body) if part.strip())
        if not command.strip():
            raise ToolParseError("`ACTION: bash` needs a command on the lines below it")
        return Action("bash", command=command)
    if not arg:
        raise ToolParseError(f"`ACTION: {kind}` needs a file path after it, e.g. `ACTION: {kind} src/app.py`")
    if kind == "view":
        path, _, rng = arg.partition(" ")
        lines = None
        if rng.strip():
            m = _RANGE.match(rng.strip())
            if m is None or int(m.group(1)) < 1 or int(m.group(2)) < int(m.group(1)):
                raise ToolParseError(
                    f"bad line range {rng.strip()!r}: write it as <first>-<last>, e.g. 10-40"
                )
            lines = (int(m.group(1)), int(m.group(2)))
        return Action("view", path=path, lines=lines)
    block = _BLOCK.search(body + "\n")
    if block is None:
        raise ToolParseError(
            "`ACTION: replace` needs a block below it: a line `<<<<<<< SEARCH`, the old lines, a line `=======`, "
            "the new lines, and a line `>>>>>>> REPLACE`"
        )
    search, replace = block.group(1), block.group(2)
    if not search.strip():
        raise ToolParseError(
            "the SEARCH part of `ACTION: replace` is empty; copy the lines to change into it"
        )
    return Action("replace", path=arg, search=search, replace=replace)


def format_bash(
    exit_code: int | None, output: str, timed_out: bool, timeout: float, disk: str | None = None
) -> str:
    """The observation for a shell command (``disk``: the sandbox's disk limit, when the command passed it)."""
    if disk is not None:
        killed = "the command was killed; " if exit_code is None else ""
        status = f"[disk limit of {disk} exceeded: {killed}delete files before writing more]"
    elif timed_out:
        status = f"[timed out after {timeout:g}s; the command was killed]"
    else:
        status = f"[exit code {exit_code}]"
    return f"{output.rstrip()}\n{status}" if output.strip() else status


def format_view(path: str, text: str, lines: tuple[int, int] | None, max_lines: int = 200) -> str:
    """The observation for ``view``: the file's lines, numbered."""
    all_lines = text.splitlines()
    first, last = lines if lines is not None else (1, min(len(all_lines), max_lines))
    last = min(last, len(all_lines), first + max_lines - 1)
    if first > max(len(all_lines), 1):
        return f"{path} has {len(all_lines)} lines; line {first} is past the end"
    body = "\n".join(f"{i:>5}  {all_lines[i - 1]}" for i in range(first, last + 1))
    more = f"\n[... lines {last + 1}-{len(all_lines)} not shown]" if last < len(all_lines) else ""
    return f"{path} (lines {first}-{last} of {len(all_lines)}):\n{body}{more}"


def apply_replace(text: str, action: Action) -> str:
    """``text`` with the action's SEARCH block replaced.

    Raises:
        ToolParseError: the block does not occur exactly once.
    """
    count = text.count(action.search)
    if count != 1:
        where = "is not in" if count == 0 else f"occurs {count} times in"
        hint = "copy the lines exactly" if count == 0 else "add surrounding lines so it is unique"
        raise ToolParseError(f"the SEARCH block {where} {action.path}; {hint}")
    return text.replace(action.search, action.replace, 1)


def bash_action(command: str) -> str:
    """The text of a turn that runs ``command`` (what scripted agents write)."""
    return f"ACTION: bash\n{command}"


def apply_patch_command(patch: str) -> str:
    """A shell command that applies ``patch`` to the repository with ``git apply`` (read from a here-document)."""
    marker = "CREDITGYM_PATCH_EOF"
    while marker in patch:
        marker += "_"
    body = patch if patch.endswith("\n") else patch + "\n"
    return f"git apply -v - <<'{marker}'\n{body}{marker}"
