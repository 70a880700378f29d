"""Files guarded by OS locks (``fcntl.flock``): a session's hold, and an atomic save's temporary.

POSIX only. A ``flock`` belongs to one open file (not to a process, as an ``fcntl``
byte-range lock does), so two opens in one process exclude each other; the kernel drops
it when the file is closed or its process dies, SIGKILL included, so a lock never goes
stale. docs/sessions.md ("One agent per session", "The JSON form") says how each is used.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import IO, Optional

__all__ = ["STALE_AFTER_S", "release_hold", "take_hold", "write_atomically"]

logger = logging.getLogger("yiemagent.history")

STALE_AFTER_S = 2.0
"""An unlocked temporary younger than this may be a save between creating it and locking it."""

_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def take_hold(name: str) -> tuple[Optional[IO[bytes]], str]:
    """Lock the file ``name`` (created if absent) without waiting, and write this process's id in it.

    Returns the open, locked file, or None and what the holder wrote (its process id, or
    "" when it has not written yet) when another open file holds the lock. A holder
    removes the file before it unlocks it (``release_hold``), so a file opened before that
    removal is locked by nobody yet guards nothing: after locking, the file must still be
    the one ``name`` leads to, or it is locked again.

    Raises:
        OSError: the file cannot be created or locked for another reason.
    """
    while True:
        handle = open(name, "a+b")  # created if absent, never truncated by opening
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _written_in(handle)
            handle.close()
            if exc.errno in _BUSY:
                return None, holder
            raise
        try:
            current = os.path.samestat(os.fstat(handle.fileno()), os.stat(name))
        except FileNotFoundError:
            current = False
        if current:
            break
        handle.close()
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n".encode("ascii"))
    handle.flush()
    return handle, ""


def release_hold(handle: IO[bytes]) -> None:
    """Remove the file ``take_hold`` locked, then unlock it (while locked, no other holder made a file of that name)."""
    try:
        os.unlink(handle.name)
    except FileNotFoundError:
        pass
    finally:
        handle.close()


def _written_in(handle: IO[bytes]) -> str:
    try:
        handle.seek(0)
        text = handle.read(32).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary in its directory: flushed, fsynced, renamed, the directory fsynced.

    A reader or a crash sees the old file or the new one, never half of one. The
    temporary (``.NAME.xxxxxxxx.tmp``, ``tempfile.mkstemp``'s eight characters) is locked
    from its creation to the rename, so a save killed mid-write leaves an unlocked one,
    and the next save of ``target`` removes those (``_remove_stale_temporaries``).
    """
    directory = target.parent if str(target.parent) else Path(".")
    _remove_stale_temporaries(directory, target.name)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # until the rename: a live save's temporary is never taken for stale
        with os.fdopen(fd, "wb", closefd=False) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    _fsync_directory(directory)


def _remove_stale_temporaries(directory: Path, name: str) -> None:
    """Remove the temporaries of saves of ``name`` that died (docs/sessions.md); never raises.

    Only that file's (``.NAME.`` + mkstemp's eight characters + ``.tmp``; another file's,
    ``.NAME.bak.xxxxxxxx.tmp``, has another shape), and only stale ones: unlocked (a live
    save holds its temporary's lock until the rename) and at least ``STALE_AFTER_S`` old
    (a save locks its temporary a moment after creating it).
    """
    shape = re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp")
    try:
        entries = [e for e in os.scandir(directory) if shape.fullmatch(e.name)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or now - info.st_mtime < STALE_AFTER_S:
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.path.samestat(os.fstat(fd), os.stat(entry.path, follow_symlinks=False)):
                os.unlink(entry.path)
                logger.info("removed %s, left by a save of %s that did not finish", entry.path, name)
        except OSError:  # locked by a live save, or gone meanwhile
            pass
        finally:
            os.close(fd)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a platform without directory fds skips it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
