"""The dev state file of ``crank up``: a 0600 JSON file in the user's data directory.

It holds what a local run must keep across restarts: the generated
``CRANK_SECRET_KEY`` (hashes of keys and tokens depend on it), the dev admin
token, the demo agent and approval keys, and the URLs of the running servers.
The CLI client falls back to it when ``CRANK_URL``/``CRANK_TOKEN`` are unset::

    state = load_dev_state()
    if state is not None:
        url, token = state.control_plane_url, state.admin_token

``CRANK_DATA_DIR`` moves the whole directory (tests use it); otherwise it is
``platformdirs.user_data_dir("crank")``. It is a local development aid only:
deployments set ``CRANK_SECRET_KEY`` and create tokens with ``crank tokens create``.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

import msgspec
import platformdirs

from control_plane.cli.common import CliError
from shared.keys import KeyKind, generate_key

STATE_FILE = "dev-state.json"
LOCK_FILE = "up.lock"  # held by the running `crank up` of a data directory


class DevState(msgspec.Struct, kw_only=True):
    """What ``crank up`` keeps across runs, in plain text (a 0600 file): dev credentials, URLs."""

    secret_key: str
    admin_token: str
    # agent slug -> key, for the demo agents (``agent`` and ``approval`` kinds).
    agent_keys: dict[str, str] = msgspec.field(default_factory=dict)
    approval_keys: dict[str, str] = msgspec.field(default_factory=dict)
    # Written by ``crank up`` once the servers listen; empty before the first run.
    control_plane_url: str = ""
    gateway_url: str = ""
    # The embedded database's URL (a Unix socket, no password), for `crank tokens`
    # while `crank up` runs; empty when `crank up` uses CRANK_DATABASE_URL.
    database_url: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(DevState)


def data_dir() -> Path:
    """``CRANK_DATA_DIR``, else the user's data directory for crank."""
    override = os.environ.get("CRANK_DATA_DIR")
    if override:
        return Path(override).expanduser().resolve()
    return Path(platformdirs.user_data_dir("crank", appauthor=False))


def dev_state_path() -> Path:
    return data_dir() / STATE_FILE


def up_is_running(directory: Path | None = None) -> bool:
    """Whether a `crank up` holds the lock of ``directory`` (default: ``data_dir()``)."""
    try:
        handle = open((directory or data_dir()) / LOCK_FILE, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def running_up_state() -> DevState | None:
    """The dev state of the `crank up` running on this data directory with its
    embedded database, or None (none runs, or it uses CRANK_DATABASE_URL)."""
    if not up_is_running():
        return None
    state = load_dev_state()
    return state if state is not None and state.database_url else None


def load_dev_state(path: Path | None = None) -> DevState | None:
    """The saved state, or None when ``crank up`` has never run here."""
    path = path or dev_state_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return _decoder.decode(raw)


def save_dev_state(state: DevState, path: Path | None = None) -> None:
    """Write atomically; the file is created 0600 and never exists with a wider mode."""
    path = path or dev_state_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask cannot widen it, but an old temp file might be wider
        os.write(fd, msgspec.json.format(_encoder.encode(state)) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def new_secret_key() -> str:
    # 43 url-safe characters (256 bits) plus a marker that says where it came from.
    return secrets.token_urlsafe(32) + "-crank-dev"


def load_or_create_dev_state(path: Path | None = None) -> DevState:
    """The saved dev state, or a new one saved; raises CliError when the file is unreadable."""
    path = path or dev_state_path()
    try:
        state = load_dev_state(path)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise CliError(
            f"cannot read the dev state file {path} ({exc}); move it away to start over "
            "(the saved token and keys are then replaced)"
        ) from None
    if state is None:
        state = DevState(secret_key=new_secret_key(), admin_token=generate_key(KeyKind.ADMIN))
        save_dev_state(state, path)
    return state
