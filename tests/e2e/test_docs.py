"""The README is tested: its command table matches the CLI, and what it promises is there.

Its code blocks run in tests/e2e/test_docs_examples.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text(encoding="utf-8")


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", TEXT, flags=re.S)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEBOUND_")}
    env["HOME"] = str(tmp_path / "home")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_readme_opens_with_the_two_setup_commands() -> None:
    first = _blocks("bash")[0]
    assert first.splitlines()[0].startswith("make demo")
    assert first.splitlines()[1].startswith("make test")


def test_quick_start_ends_with_an_offline_proof_check() -> None:
    assert "tracebound verify-proof" in _blocks("bash")[1]


def test_command_table_matches_the_cli() -> None:
    from typer.main import get_command

    from tracebound.cli.app import app

    group = get_command(app)
    commands = set(group.commands)  # type: ignore[attr-defined]
    documented = set(re.findall(r"^\| `tracebound ([a-z-]+)", TEXT, flags=re.M))
    assert documented == commands


def test_examples_run(tmp_path: Path) -> None:
    examples = sorted((README.parent / "examples").glob("*.py"))
    assert examples, "examples/ is empty"
    for example in examples:
        proc = subprocess.run(
            [sys.executable, str(example)], cwd=tmp_path, env=_env(tmp_path),
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"{example.name}: {proc.stderr}"


def test_the_report_row_names_the_reports_that_draw_charts() -> None:
    from typer.main import get_command

    from tracebound.cli.app import app

    report = get_command(app).commands["report"]  # type: ignore[attr-defined]
    charts = {
        name
        for name, command in report.commands.items()
        if any("--chart" in getattr(p, "opts", ()) for p in command.params)
    }
    row = next(line for line in TEXT.splitlines() if line.startswith("| `tracebound report "))
    which = re.search(r"; ([^;]*?) also draws? `--chart", row)
    assert which is not None, row
    said = set(re.findall(r"`(\w+)`", which.group(1)))
    assert charts == said == {"cost", "gates"}, row


def test_the_tamper_table_says_what_jsonl_reports_for_a_deleted_middle_event() -> None:
    row = next(line for line in TEXT.splitlines() if line.startswith("| delete one event in the"))
    assert "`gap`" in row and "JSONL" in row and "docs/jsonl.md" in row


def _guides() -> str:
    return "\n".join(
        [TEXT, *(p.read_text(encoding="utf-8") for p in sorted(README.parent.glob("docs/*.md")))]
    )


def test_every_public_name_is_documented() -> None:
    """A user reads the README and the guides, not tests/unit/test_public_api.py: each name
    `import tracebound` exports is named there (`ANY_VERSION`, `NoteVerifier`, … were not)."""
    import tracebound

    text = _guides()
    missing = [n for n in tracebound.__all__ if n != "__version__" and f"`{n}`" not in text]
    assert missing == []


def test_every_environment_variable_of_the_cli_is_documented() -> None:
    """The variables are read from the CLI's options, so a new one cannot go unmentioned
    (`TRACEBOUND_VERIFIER_KEY`, `TRACEBOUND_REDACTION_KEY`, `TRACEBOUND_POLICY`, … were)."""
    from typer.main import get_command

    from tracebound.cli.app import app

    def envvars(command: object) -> set[str]:
        found = {p.envvar for p in getattr(command, "params", ()) if isinstance(p.envvar, str)}
        for sub in getattr(command, "commands", {}).values():
            found |= envvars(sub)
        return found

    declared = envvars(get_command(app))
    assert "TRACEBOUND_STORE" in declared
    text = _guides()
    assert sorted(v for v in declared if f"`{v}`" not in text) == []


# -- examples/remediation/README.md --------------------------------------------------------

REMEDIATION = README.parent / "examples" / "remediation" / "README.md"


def test_the_remediation_readme_says_what_make_demo_runs() -> None:
    """It said `tracebound demo` remediates; `make demo` runs remediate.py for that."""
    text = REMEDIATION.read_text(encoding="utf-8")
    assert "`remediate.py` remediates" in text and "`tracebound demo` remediates" not in text
    first = re.findall(r"```bash\n(.*?)```", text, flags=re.S)[0].strip()
    recipe = (README.parent / "Makefile").read_text(encoding="utf-8").split("\ndemo:", 1)[1]
    assert first.replace(".venv/bin/", "$(BIN)/") in recipe


def test_the_remediation_readme_runs_as_written(tmp_path: Path) -> None:
    """From a checkout's root without the venv active: every bash block, then the two
    commands the gated run prints, pasted; the sample of that output is what it prints."""
    text = REMEDIATION.read_text(encoding="utf-8")
    (tmp_path / "examples").symlink_to(README.parent / "examples")
    if sys.prefix != sys.base_prefix:  # the venv the tests run in, as `make demo` makes it
        (tmp_path / ".venv").symlink_to(sys.prefix)
    else:
        python = tmp_path / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        python.chmod(0o755)
    env = _env(tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != bin_dir)
    env["COLUMNS"] = "80"

    def sh(command: str) -> str:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        return proc.stdout

    outputs = [sh(block) for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]
    assert len(outputs) == 2 and "completed" in outputs[0]
    gated = outputs[1].splitlines()
    at = next(i for i, line in enumerate(gated) if line.startswith("waiting for approval:"))
    shown = gated[at : at + 5]
    if sys.prefix != sys.base_prefix:
        run = re.search(r"--resume (\S+)", shown[-1])
        assert run is not None
        (sample,) = re.findall(r"```text\n(.*?)```", text, flags=re.S)
        assert [line.replace(run.group(1), "RUN") for line in shown] == sample.splitlines()
    for command in shown[-2:]:
        sh(command.strip())
    assert (tmp_path / "remediation-run" / "project" / "requirements.txt").read_text() == (
        "tinytemplate==2.0.0\n"
    )


def test_the_exit_code_table_says_what_1_and_3_mean_for_the_run_commands() -> None:
    """The table said 1 meant a damaged ledger or a bad proof and 3 an incomplete `verify`,
    but `resume` exits 1 for a run that ended failed or rejected and 3 for one still at its
    gate, `replay --rerun` 1 for a divergence, `metrics --check` 1 for an SLO violation
    (tracebound/cli/runs.py)."""
    rows = {line.split("|")[1].strip(): line for line in TEXT.splitlines() if line.startswith("| ")}
    for command in ("`resume`", "`replay --rerun`", "`metrics --check`"):
        assert command in rows["1"], rows["1"]
    assert "`resume`" in rows["3"], rows["3"]


# -- the README's Python, as a user's own code -----------------------------------------------


@pytest.mark.slow
def test_the_python_examples_type_check_as_a_users_code_would(tmp_path: Path) -> None:
    """The library is typed (py.typed) and says mypy --strict; a user who copies the README's
    Python into a checked project must not get errors for following it. It ran, but its
    `CostIncurred(source="openai")` was an arg-type error: `source` is a `CostSource`."""
    api = pytest.importorskip("mypy.api")
    script = tmp_path / "readme_example.py"
    script.write_text("\n\n".join(_blocks("python")), encoding="utf-8")
    stdout, stderr, status = api.run(
        ["--strict", "--no-error-summary", "--show-error-codes", "--config-file", os.devnull,
         "--cache-dir", str(tmp_path / "cache"), str(script)]
    )  # fmt: skip
    assert status == 0, stdout + stderr
