"""``crank COMMAND`` imports only that command's module (docs/performance.md)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.cli import COMMANDS, build_parser
from tests.support.cli import OPERATIONS_YAML, clean_env
from tests.support.processes import free_port


def commands_of(parser: argparse.ArgumentParser) -> set[str]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


def test_the_command_table_names_every_command_crank_help_lists() -> None:
    assert commands_of(build_parser()) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_parses_with_its_own_module_alone(command: str) -> None:
    assert command in commands_of(build_parser(command))


def test_crank_apply_loads_neither_the_database_driver_nor_the_server_stack(
    tmp_path: Path,
) -> None:
    # A valid file, read, decoded and sent: everything but an answer (nothing listens).
    path = tmp_path / "crank.yaml"
    path.write_text(OPERATIONS_YAML.format(workspace="acme", confirmation="auto"))
    script = (
        "import sys\n"
        "from control_plane.cli import main\n"
        f"code = main(['apply', '-f', {str(path)!r}])\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'psycopg', 'litestar', 'aiohttp', 'prometheus_client'})\n"
        "print(code, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=clean_env(CRANK_URL=f"http://127.0.0.1:{free_port()}", CRANK_TOKEN="crk_admin_x"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.strip() == "2 []", result
    assert "cannot reach the control plane" in result.stderr
