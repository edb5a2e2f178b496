"""docs/ci.md: the workflow is valid YAML doing what the page says, and every
``crank`` command on the page parses with the real command line."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml

from control_plane.cli import build_parser
from tests.support.paths import DOCS_DIR

PAGE = DOCS_DIR / "ci.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


def workflow() -> dict[Any, Any]:
    (text,) = blocks("yaml")
    value = yaml.safe_load(text)
    assert isinstance(value, dict)
    return value


def crank_arguments(line: str, variables: dict[str, str]) -> list[str] | None:
    """The arguments of the ``crank`` command on ``line`` (direct, piped or via docker run)."""
    line = line.split("|")[-1].strip()
    words = shlex.split(line)
    if words[:1] == ["crank"]:
        arguments = words[1:]
    elif "$CRANK_IMAGE" in words:
        arguments = words[words.index("$CRANK_IMAGE") + 1 :]
    else:
        return None
    return [variables.get(word, word) for word in arguments]


def test_workflow_lints_and_plans_pull_requests_and_publishes_main() -> None:
    flow = workflow()
    triggers = flow[True]  # YAML 1.1 reads the key `on` as true; GitHub reads it as "on"
    assert set(triggers) == {"pull_request", "push"}
    assert triggers["push"]["branches"] == ["main"]
    jobs = flow["jobs"]
    runs = {
        name: " ".join(step.get("run", "") for step in job["steps"]) for name, job in jobs.items()
    }
    assert " lint " in runs["lint"]
    assert "--dry-run" in runs["plan"]
    assert "pull_request" in jobs["plan"]["if"]
    assert "--publish" in runs["publish"]
    assert "--dry-run" not in runs["publish"]
    assert "refs/heads/main" in jobs["publish"]["if"]
    for name in ("plan", "publish"):
        env = next(step["env"] for step in jobs[name]["steps"] if "env" in step)
        assert env["CRANK_TOKEN"] == "${{ secrets.CRANK_TOKEN }}"
        assert "-e CRANK_TOKEN" in runs[name]


@pytest.mark.parametrize("source", ["workflow", "shell"])
def test_every_crank_command_on_the_page_parses(source: str) -> None:
    if source == "workflow":
        flow = workflow()
        lines = [
            step["run"] for job in flow["jobs"].values() for step in job["steps"] if "run" in step
        ]
        variables = {"$CRANK_FILE": flow["env"]["CRANK_FILE"]}
    else:
        lines = [line for block in blocks("sh") for line in block.splitlines()]
        variables = {}
    commands = [args for line in lines if (args := crank_arguments(line, variables))]
    assert len(commands) >= 3
    parser = build_parser()
    for arguments in commands:
        parsed = parser.parse_args(arguments)  # exits (SystemExit) on a bad command
        assert callable(parsed.func), arguments
