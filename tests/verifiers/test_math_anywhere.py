"""The verifier pools work from wherever Python code runs: every way is a real subprocess.

A heredoc piped to Python (``python - <<EOF``, run by bash exactly so), a script without a main guard, ``python -c``,
``python -m``, a notebook-like ``exec`` whose ``__main__`` names a file that does not exist, and an interpreter
embedded in a C program. Each steps a Math-v0 episode token by token, calls ``verify`` / ``verify_many``, and
grades a rubric. The script's top level appends a line to a marker file, so a worker that re-ran the user's main
module would show up as a second line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """\
    import json, os, time
    with open(os.environ["CREDITGYM_MARKER"], "a") as marker:
        marker.write("top level ran\\n")
    import gymnasium as gym
    import creditgym
    from creditgym.verifiers.math import verify, verify_many
    from creditgym.verifiers.rubric import Criterion, grade

    t0 = time.monotonic()
    env = gym.make("creditgym/Math-v0")
    env.reset(seed=0)
    u = env.unwrapped
    tokens = u.tokenizer(u.oracle_response(), add_special_tokens=False)["input_ids"] + [u.end_of_turn_id]
    for token in tokens:
        obs, reward, terminated, truncated, info = env.step(token)
        if terminated or truncated:
            break
    result = {
        "reward": reward,
        "terminated": terminated,
        "episode": info["status"],
        "verify": verify("so the result is \\\\boxed{\\\\frac{1}{2}}", "0.5").status,
        "many": [v.status for v in verify_many(["#### 72", "\\\\boxed{3}", "junk"], ["72", "4", "5"])],
        "rubric": grade("one two three " * 2000, [Criterion("punctuation:no_comma")]).status,
        "seconds": time.monotonic() - t0,
    }
    print("RESULT " + json.dumps(result), flush=True)
    """
)
EXPECTED = {
    "reward": 1.0,
    "terminated": True,
    "episode": "correct",
    "verify": "correct",
    "many": ["correct", "wrong", "unparseable"],
    "rubric": "correct",
}


def _result(done: subprocess.CompletedProcess[str], marker: Path) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert {k: result[k] for k in EXPECTED} == EXPECTED, result
    assert marker.read_text() == "top level ran\n", "a worker re-ran the user's main module"
    assert result["seconds"] < 120
    return result


def _env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    marker = tmp_path / "marker.txt"
    env = {**os.environ, "CREDITGYM_MARKER": str(marker), "OMP_NUM_THREADS": "1"}
    return env, marker


def test_a_heredoc_piped_to_python(tmp_path: Path) -> None:
    env, marker = _env(tmp_path)
    command = f"'{sys.executable}' - <<'EOF'\n{SCRIPT}EOF\n"
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    _result(done, marker)


def test_a_script_without_a_main_guard(tmp_path: Path) -> None:
    env, marker = _env(tmp_path)
    script = tmp_path / "no_guard.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    _result(done, marker)


def test_python_dash_c(tmp_path: Path) -> None:
    env, marker = _env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    _result(done, marker)


def test_python_dash_m_on_a_module_without_a_main_guard(tmp_path: Path) -> None:
    env, marker = _env(tmp_path)
    (tmp_path / "user_module.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "user_module"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    _result(done, marker)


def test_a_notebook_like_exec_whose_main_file_does_not_exist(tmp_path: Path) -> None:
    env, marker = _env(tmp_path)
    runner = (
        "import sys\n"
        "sys.modules['__main__'].__file__ = '/nonexistent/Untitled.ipynb'\n"
        f"exec(compile({SCRIPT!r}, '<ipython-input-1>', 'exec'), {{'__name__': '__main__'}})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", runner], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    _result(done, marker)


def test_an_interpreter_embedded_in_a_c_program(tmp_path: Path, needs: Callable[[str], None]) -> None:
    compiler = shutil.which("gcc") or shutil.which("cc")
    include = Path(sysconfig.get_paths()["include"])
    if compiler is None or not (include / "Python.h").exists():
        needs("a C compiler and Python.h to build an embedding host (`make test-tools` installs them)")
    host = tmp_path / "host"
    (tmp_path / "host.c").write_text(
        "#include <Python.h>\n"
        "int main(int argc, char **argv) {\n"
        "    if (argc != 2) return 2;\n"
        "    Py_Initialize();\n"
        "    int rc = PyRun_SimpleString(argv[1]);\n"
        "    if (Py_FinalizeEx() < 0) rc = -1;\n"
        "    return rc == 0 ? 0 : 1;\n"
        "}\n"
    )
    libdir = sysconfig.get_config_var("LIBDIR")
    build = [compiler, str(tmp_path / "host.c"), "-o", str(host), f"-I{include}", f"-L{libdir}"]
    build += [f"-lpython{sysconfig.get_config_var('LDVERSION')}", f"-Wl,-rpath,{libdir}"]
    subprocess.run(build, check=True, capture_output=True, timeout=120)
    env, marker = _env(tmp_path)
    env.pop("PATH")  # the embedded interpreter's sys.executable is then empty: nothing to re-run
    site_dir = sysconfig.get_paths()["purelib"]
    prelude = (
        f"import site, sys\nsite.addsitedir({site_dir!r})\nassert sys.executable != {sys.executable!r}\n"
    )
    done = subprocess.run([str(host), prelude + SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    _result(done, marker)
