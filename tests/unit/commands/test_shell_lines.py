"""`sglbench plan` prints what a shell would run: each printed command line, parsed by bash, is the exact env and
argv sglbench launches, whatever the values hold (issue 29: an unquoted value with `;` ran another command)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cluster.cli import app
from cluster.commands.shell_lines import quote_word, shell_command
from cluster.engines.registry import get_engine
from cluster.plan.runs import expand_variants
from cluster.config.loader import load_spec
from cluster.tuning.stage import with_artifact

REPO = Path(__file__).resolve().parents[3]
HOSTILE = ["a; touch /tmp/sglbench-pwned", "$(touch /tmp/sglbench-pwned)", "it's \"quoted\"", "`id`", "a b\tc",
           "x\ny", "", "*", "~root", "--flag=v;w", "\\", "!event", "é ünïcode"]


def _bash_words(line: str, env: dict[str, str] | None = None) -> list[str]:
    """The words bash makes of `line` (assignments included): `set --` takes them as positional parameters."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    out = subprocess.run([bash, "-c", f"set -- {line}\nprintf '%s\\0' \"$@\""], capture_output=True, check=True,
                         env={"PATH": "/usr/bin:/bin", **(env or {})})
    return out.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("word", HOSTILE)
def test_every_word_survives_bash_as_one_word(word: str) -> None:
    assert _bash_words(quote_word(word)) == [word]
    assert "\n" not in quote_word(word)  # one command per line, whatever the value


def test_env_and_argv_round_trip() -> None:
    env = {"B": HOSTILE[0], "A": "plain"}
    argv = ["python", "-m", "x", "--name", HOSTILE[1], "--other", HOSTILE[5]]
    cmd = shell_command(argv, env)
    assert _bash_words(cmd.line) == ["A=plain", f"B={HOSTILE[0]}", *argv]
    assert shlex_split_ok(cmd.line)


def shlex_split_ok(line: str) -> bool:
    import shlex

    return bool(shlex.split(line))


def test_secrets_are_references_never_values() -> None:
    argv = ["python", "--api-key", "sk-planted-1234", "--x-token=tok-planted-5678", "--port", "1"]
    cmd = shell_command(argv, {"HF_TOKEN": "hf-planted-9999"})
    for planted in ("sk-planted-1234", "tok-planted-5678", "hf-planted-9999"):
        assert planted not in cmd.line and planted not in cmd.comment()
    # with the referenced variables set, bash runs exactly the launched argv and env
    words = _bash_words(cmd.line, {"API_KEY": "sk-planted-1234", "X_TOKEN": "tok-planted-5678",
                                   "HF_TOKEN": "hf-planted-9999"})
    assert words == ["HF_TOKEN=hf-planted-9999", *argv[:3], "--x-token=tok-planted-5678", "--port", "1"]
    assert "API_KEY (sha256:" in cmd.comment()


def test_plan_prints_lines_bash_runs_as_the_launched_argv(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "experiments" / "demo-sim.yaml").read_text())
    doc["server"]["env"] = {"SGLBENCH_TEST_VALUE": HOSTILE[0] + " " + HOSTILE[1] + HOSTILE[2]}
    doc["model"]["served_name"] = "my model; echo pwned"
    doc["workloads"] = doc["workloads"][:1]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = CliRunner().invoke(app, ["plan", str(path)])
    assert out.exit_code == 0, out.output
    spec = load_spec(path)
    lines = [ln for ln in out.stdout.splitlines() if ln and not ln.startswith("#") and "=" in ln.split(" ")[0]]
    variants = expand_variants(spec)
    assert len(lines) == len(variants)
    for v, line in zip(variants, lines):
        cmd = get_engine(v.engine).launch(with_artifact(v, None), "127.0.0.1", 30000, spec.engines.get(v.engine),
                                          "python")
        expected = [f"{k}={val}" for k, val in sorted(cmd.env.items())] + list(cmd.argv)
        assert _bash_words(line) == expected
        subprocess.run(["bash", "-n", "-c", line], check=True)
