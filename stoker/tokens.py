"""The job manager's token when none is given: made once into ``<state dir>/token`` (0600) by
``stoker server``, and found there again by the CLI (no open door on a fresh
install).

The server reads the file on every start (a restarted manager keeps its token; delete the
file for a new one). The CLI, given no ``--token``/``STOKER_TOKEN``, reads the file named by
``STOKER_TOKEN_FILE``, else ``./.stoker-server/token`` (``stoker server``'s default state
folder, in the folder the CLI runs in), the latter only for a job manager on a loopback
address: a token never goes to another host because a file happened to lie around.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

from stoker import procs
from stoker.errors import InvalidInput

FILE_NAME = "token"
DEFAULT_STATE_DIR = ".stoker-server"  # stoker server --state-dir's default
ENV_FILE = "STOKER_TOKEN_FILE"
_MAX = 4096


def read_token(path: Path, what: str) -> str:
    """The token in ``path``: its first line, stripped; :class:`InvalidInput` naming ``what``
    when the file cannot be read or holds none."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(_MAX).strip().splitlines()
    except OSError as e:
        raise InvalidInput(what, f"cannot read the token file {path}: {e.strerror}") from e
    if not text or not text[0].strip():
        raise InvalidInput(what, f"the token file {path} holds no token")
    return text[0].strip()


def server_token(state_dir: Path) -> tuple[str, Path, bool]:
    """The manager's token: the one in ``state_dir/token``, or a new one written there (only
    the owner may read it); (token, its file, whether it was made now)."""
    path = state_dir / FILE_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _private_token_file(path)
        return read_token(path, "token file"), path, False
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token, path, True


def _private_token_file(path: Path) -> None:
    """Refuse a token file others may read (an older install made it 0644, or a copy did):
    the token in it may be known, so it is not fixed silently."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return  # read_token says what is wrong with it
    if mode & 0o077:
        raise InvalidInput(
            "token file",
            f"{path} can be read or written by other users (mode {mode:04o}): the token in it "
            f"may be known. Run 'chmod 600 {path}' to keep it, or delete the file for a new "
            "token, and start again",
        )


def private_state_dir(state_dir: Path) -> list[str]:
    """Make the manager's state folder its user's alone, as stoker makes it now (an older
    install left it 0755 with 0644 files: the store, the logs): the folder 0700 and what lies
    directly in it without group and other bits (the folder's 0700 keeps others from what is
    further down). What was changed, as lines to say; :class:`InvalidInput` for a folder that
    is not this user's or is a shared one (the sticky bit: /tmp), which stoker will not
    change."""
    st = state_dir.stat()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        raise InvalidInput(
            "--state-dir", f"{state_dir} belongs to another user (uid {st.st_uid}): give a "
            "folder of the user that runs stoker server",
        )  # fmt: skip
    said: list[str] = []
    if mode & 0o077:
        if mode & stat.S_ISVTX:
            raise InvalidInput(
                "--state-dir", f"{state_dir} is a shared folder (mode {mode:04o}, sticky): "
                "give a folder of its own",
            )  # fmt: skip
        os.chmod(state_dir, 0o700)
        said.append(f"{state_dir} was {mode:04o} (an older install?): made 0700")
    fixed = 0
    with os.scandir(state_dir) as entries:
        for e in entries:
            if e.name == FILE_NAME or e.is_symlink():
                continue  # the token is refused, not fixed (server_token)
            m = stat.S_IMODE(e.stat(follow_symlinks=False).st_mode)
            if m & 0o077:
                os.chmod(e.path, m & 0o700)
                fixed += 1
    if fixed:
        said.append(f"{fixed} entries of {state_dir} could be read by others: made private")
    return said


def _loopback(url: str) -> bool:
    return procs.is_loopback(urlsplit(url if "://" in url else f"http://{url}").hostname or "")


def client_token(server: str, given: str | None) -> str | None:
    """The token the CLI sends to ``server``: ``given`` (``--token``, ``STOKER_TOKEN``), else
    the file ``STOKER_TOKEN_FILE`` names, else a loopback manager's default token file in the
    current folder; None when there is none."""
    if given:
        return given
    named = os.environ.get(ENV_FILE)
    if named:
        return read_token(Path(named), ENV_FILE)
    local = Path(DEFAULT_STATE_DIR) / FILE_NAME
    if _loopback(server) and local.is_file():
        return read_token(local, "token file")
    return None


__all__ = ["ENV_FILE", "client_token", "private_state_dir", "read_token", "server_token"]
