"""docs/quickstart.md followed word for word: every shell block runs as written (in
one shell session, so its exports carry over), every sample output is compared
with what the command printed, then ``crank up`` restarts and the quickstart's
changes are still there ("the next ``./dev up`` keeps your data").

What legitimately differs between runs — tokens, keys, session ids, sign-in
codes, times, ports, the data directory — is replaced by placeholders on both
sides before comparing; everything else must match.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.client_snippets import printed_curl_lines
from tests.support.crank_up import CrankUp
from tests.support.paths import DOCS_DIR

QUICKSTART = DOCS_DIR / "quickstart.md"
DOC_PORTS = {"control_plane": 8000, "gateway": 8080, "sales": 8090}
DOC_DATA_DIR = "/home/you/.local/share/crank"
SESSION_PLACEHOLDER = "<MCP-Session-Id from the initialize answer>"
OUTPUT_LANGUAGES = ("", "json")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    before: str  # the prose between the previous block and this one


def blocks(markdown: str) -> list[Block]:
    found: list[Block] = []
    end = 0
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", markdown, re.M | re.S):
        found.append(Block(match[1], match[2], markdown[end : match.start()]))
        end = match.end()
    return found


def normalize(text: str, crank_up: CrankUp) -> str:
    """Both sides with what differs between runs replaced, and runs of blanks collapsed
    (tables align on the real widths)."""
    text = text.replace(str(crank_up.data_dir), DOC_DATA_DIR)
    for name, port in crank_up.ports.items():
        if name in DOC_PORTS:
            text = text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{DOC_PORTS[name]}")
    text = re.sub(r"crk_(admin|agent|approval)_[A-Za-z0-9]+", r"crk_\1_X", text)
    text = re.sub(r"crs1\.[\w.-]+", "SESSION", text)
    text = re.sub(r"code=[\w-]+", "code=CODE", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)?", "TIME", text)
    text = re.sub(r"[ \t]+", " ", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def same_output(printed: str, sample: str, crank_up: CrankUp) -> None:
    got, want = normalize(printed, crank_up), normalize(sample, crank_up)
    try:
        assert json.loads(got) == json.loads(want)
    except json.JSONDecodeError:
        assert got == want


class Shell:
    """One terminal: each block runs in bash with every variable the earlier blocks set
    (``set -a`` exports them all); stdout and stderr together, as a terminal shows."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env
        self._saved = cwd / ".quickstart-env"

    def run(self, script: str) -> str:
        wrapped = f'set -a\n{script}\n__status=$?\nenv -0 > "{self._saved}"\nexit $__status\n'
        done = subprocess.run(
            ["bash", "-c", wrapped],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )
        if self._saved.exists():
            pairs = self._saved.read_bytes().split(b"\0")
            self.env = dict(p.decode().split("=", 1) for p in pairs if b"=" in p)
        return done.stdout


def doc_ports_to_real(script: str, crank_up: CrankUp) -> str:
    for name, port in DOC_PORTS.items():
        script = script.replace(f"127.0.0.1:{port}", f"127.0.0.1:{crank_up.ports[name]}")
    return script


def banner_line(banner: str, label: str) -> str:
    found = re.search(rf"^\s*{re.escape(label)}\s+(\S+)$", banner, re.M)
    assert found is not None, f"{label!r} not in the banner:\n{banner}"
    return found[1]


def run_banner_mcp_lines(banner: str) -> tuple[str, str, str]:
    """The banner's two MCP curl lines run as step 2 says: initialize, then tools/list
    with the session id it answered. (headers, initialize body, tools/list answer)."""
    mcp_block = banner[banner.index("MCP:") :].split("\n\n")[0]
    initialize_line, list_line = printed_curl_lines(mcp_block)[:2]
    answer = subprocess.run(
        ["bash", "-c", initialize_line], capture_output=True, text=True, timeout=30
    ).stdout.replace("\r\n", "\n")
    head, _, body = answer.partition("\n\n")
    session = re.search(r"^mcp-session-id: (\S+)", head, re.M | re.I)
    assert session is not None, head
    listed = subprocess.run(
        ["bash", "-c", list_line.replace(SESSION_PLACEHOLDER, session[1])],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return head, body, listed


def check_step_two(sample_headers: Block, sample_list: Block, banner: str, up: CrankUp) -> None:
    """Step 2 pastes the banner's two MCP curl lines; its samples are their answers."""
    head, body, listed = run_banner_mcp_lines(banner)
    sample_head, _, sample_body = sample_headers.text.partition("\n\n")
    assert head.splitlines()[0] == sample_head.splitlines()[0]
    names = {line.split(":")[0].lower() for line in head.splitlines()[1:]}
    assert names == {line.split(":")[0].lower() for line in sample_head.splitlines()[1:]}
    same_output(body, sample_body, up)
    same_output(listed, sample_list.text, up)


def never_run(script: str) -> bool:
    """Step 7 deletes the user's real data directory: this test has its own."""
    return script.strip().startswith("rm -rf ~")


@pytest.mark.timeout(420)
def test_the_quickstart_works_word_for_word(
    start_crank_up: Callable[..., CrankUp], tmp_path: Path
) -> None:
    up = start_crank_up()
    banner = up.wait_ready()
    token = banner_line(banner, "admin token")

    terminal = tmp_path / "terminal"
    terminal.mkdir()
    # The quickstart runs `.venv/bin/crank` from the repository root.
    (terminal / ".venv").symlink_to(Path(sys.executable).parent.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    shell = Shell(terminal, env | {"CRANK_DATA_DIR": str(up.data_dir)})

    steps = blocks(QUICKSTART.read_text())
    ran = 0
    index = 0
    while index < len(steps):
        block = steps[index]
        following = steps[index + 1] if index + 1 < len(steps) else None
        sample = following if following and following.language in OUTPUT_LANGUAGES else None
        if block.language == "sh" and block.text.strip() == "./dev up":
            assert sample is not None
            same_output(banner, sample.text, up)
            index += 2
            continue
        if block.language == "" and block.text.startswith("HTTP/1.1"):
            assert following is not None
            assert following.language == "json"
            check_step_two(block, following, banner, up)
            index += 2
            continue
        if block.language == "yaml":
            saved_as = re.search(r"Save this as `([^`]+)`", block.before)
            assert saved_as is not None, block.text[:80]
            (terminal / saved_as[1]).write_text(block.text)
            index += 1
            continue
        assert block.language == "sh", f"a block the test does not know: {block.text[:80]}"
        if never_run(block.text):
            index += 1
            continue
        script = doc_ports_to_real(block.text, up).replace("crk_admin_...   # paste yours", token)
        printed = shell.run(script)
        ran += 1
        if sample is not None:
            same_output(printed, sample.text, up)
            index += 2
        else:
            index += 1
    assert ran >= 10, "the quickstart's shell blocks were not found"

    # "Leave it running. Ctrl-C stops everything. The next ./dev up keeps your data."
    assert up.stop(signal.SIGINT) == 0
    again = start_crank_up()
    assert mcp_session_tools(again.wait_ready()) == [
        "frankfurter_latest_rate",
        "frankfurter_currencies",
    ]
    assert again.stop(signal.SIGINT) == 0


def mcp_session_tools(banner: str) -> list[str]:
    """The tool names the banner's MCP curl lines list."""
    _, _, listed = run_banner_mcp_lines(banner)
    return [tool["name"] for tool in json.loads(listed)["result"]["tools"]]
