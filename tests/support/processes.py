"""Processes and ports as the command-line tests watch them, read from /proc."""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, from /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(root: int) -> set[int]:
    """Every process below ``root``: children, their children, and so on."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _proc_stat(int(entry.name))
            if found is not None:
                children.setdefault(found[1], []).append(int(entry.name))
    result: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            result.add(child)
            todo.append(child)
    return result


def running(pid: int) -> bool:
    """The process is alive (a zombie is not)."""
    found = _proc_stat(pid)
    return found is not None and found[0] not in ("Z", "X")


def accepts_connections(port: int) -> bool:
    """Something listens on 127.0.0.1:``port``."""
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def memory_kib(pid: int) -> tuple[int, int]:
    """(resident set now, its high-water mark) of a live process, in KiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def largest_descendant(root: int) -> int:
    """The descendant of ``root`` with the most resident memory: a server's app worker."""
    found = [pid for pid in descendants(root) if running(pid)]
    assert found, f"process {root} has no live descendant"
    return max(found, key=lambda pid: memory_kib(pid)[0])
