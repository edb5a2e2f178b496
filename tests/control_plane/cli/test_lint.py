"""``crank lint`` (local, exit codes 0/1/2, text and JSON) and ``crank apply`` on lint errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from control_plane.cli import main
from control_plane.cli.client import Client
from control_plane.demo import demo_file_text
from tests.support.cli import OPERATIONS_YAML, clean_env, crank

CLEAN = OPERATIONS_YAML.format(workspace="default", confirmation="auto")
VAGUE = CLEAN.replace(
    "description: Deletes one order by id. Use when the user asks to cancel an order.",
    "description: Выполняет запрос к API.",
)


def lint(tmp_path: Path, text: str, *args: str, name: str = "crank.yaml") -> int:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return main(["lint", str(path), *args])


def test_clean_file_exits_0_and_prints_its_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lint(tmp_path, CLEAN) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "operation delete_order:"
    assert re.match(r"\s+warning\s+response-select\s+response\.select: ", out[1])
    assert out[2].strip().startswith("hint: Set response.select")
    assert out[-1].endswith("crank.yaml: 0 errors, 1 warning")


def test_demo_file_has_no_findings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lint(tmp_path, demo_file_text(8090)) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(": no findings")


def test_file_with_lint_errors_exits_1_and_names_rule_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lint(tmp_path, VAGUE) == 1
    out = capsys.readouterr().out
    assert re.search(r"error\s+description-vague\s+description: 'Выполняет запрос к API\.'", out)
    assert out.splitlines()[-1].endswith("1 error, 1 warning")


def test_json_format_prints_the_findings_of_the_lint_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert lint(tmp_path, VAGUE, "--format", "json") == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["rule"], f["severity"], f["resource"], f["field"]) for f in findings] == [
        ("description-vague", "error", "operation:delete_order", "description"),
        ("response-select", "warning", "operation:delete_order", "response.select"),
    ]


def test_validation_errors_and_unknown_fields_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    invalid = OPERATIONS_YAML.format(workspace="default", confirmation="false")
    assert lint(tmp_path, invalid) == 1
    assert re.search(r"error\s+delete-confirmation\s+safety\.confirmation", capsys.readouterr().out)

    unknown = CLEAN.replace("title: Currency", "colour: red\n    title: Currency")
    assert lint(tmp_path, unknown, "--format", "json") == 1
    [found] = json.loads(capsys.readouterr().out)["findings"]
    assert (found["rule"], found["resource"], found["field"]) == (
        "spec-invalid",
        "file",
        "agents[0]",
    )


def test_missing_file_and_malformed_yaml_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lint", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert lint(tmp_path, "operations:\n  - name: [unclosed\n", name="broken.yaml") == 2
    assert re.search(r"broken\.yaml:3:\d+: not valid YAML", capsys.readouterr().err)


def test_lint_reads_stdin_in_a_process_of_its_own_without_any_server(tmp_path: Path) -> None:
    env = clean_env(CRANK_URL="http://127.0.0.1:9", CRANK_DATA_DIR=str(tmp_path))
    result = crank("lint", "-", env=env, stdin=VAGUE)
    assert result.returncode == 1, result.stderr
    assert "description-vague" in result.stdout


def test_apply_with_lint_errors_exits_1_prints_findings_and_writes_nothing(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "crank.yaml"
    path.write_text(VAGUE.replace("workspace: default", f"workspace: {workspace}"))

    result = crank("apply", "-f", str(path), "--publish", env=cli_env)

    assert result.returncode == 1, result.stderr
    assert "1 error, 1 warning; nothing was applied" in result.stderr
    assert "operation delete_order:" in result.stderr
    assert re.search(r"error\s+description-vague\s+description:", result.stderr)
    assert result.stdout == ""
    listing = Client(cli_env["CRANK_URL"], cli_env["CRANK_TOKEN"]).get(
        f"/workspaces/{workspace}/operations"
    )
    assert listing["items"] == []


def test_apply_prints_lint_warnings_under_the_plan(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "crank.yaml"
    path.write_text(CLEAN.replace("workspace: default", f"workspace: {workspace}"))

    result = crank("apply", "-f", str(path), env=cli_env)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "lint: 0 errors, 1 warning" in lines
    assert "  operation delete_order:" in lines
    assert lines[-1] == "created 3, updated 0, published 0; 0 unchanged"


def test_an_unknown_field_gets_a_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = CLEAN.replace("    description: Deletes one order", "    descripton: Deletes one order")
    assert lint(tmp_path, typo, "--format", "json") == 1
    [found] = json.loads(capsys.readouterr().out)["findings"]
    assert (found["rule"], found["field"]) == ("spec-invalid", "operations[1]")
    assert found["message"] == (
        "Object contains unknown field `descripton`; did you mean `description`?"
    )

    nested = CLEAN.replace("query: {base: base", "qeury: {base: base")
    assert lint(tmp_path, nested) == 1
    assert "unknown field `qeury`; did you mean `query`?" in capsys.readouterr().out
