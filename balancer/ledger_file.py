"""The safety ledger in a local file (`gputide run --ledger-file PATH`), for a controller that restarts without
leader election: a single replica in a crash loop, or `gputide run --once` from cron.

Without it such a controller starts every run with a full eviction budget and no cooldowns, so one that restarts
every minute may evict its hourly budget every minute. `LedgerFile` keeps the contract of an elector's
`load_state` / `save_state` (balancer/actuate/leader.py), so `LedgerHandover` inherits from it and hands on to it as
it does through the Lease, with the same rules (balancer/ledger_handover.py): the evictions and cooldowns of a
cycle's actions saved before any is carried out (evictions wait while that save fails), a failed save tried again
every cycle, an unreadable ledger taken as a spent budget.

* `save_state` writes atomically: a temporary file in the same folder, flushed and fsync'ed, `os.replace`d over
  PATH, then the folder fsync'ed, so a crash at any point leaves the last ledger or the new one, never half of one.
  A write that fails raises `LedgerNotSaved` (`refused`: the folder or file is not writable; `error`: anything else,
  a full disk) and leaves PATH as it was.
* `load_state` reads PATH: None when it does not exist (a first start: an empty ledger, said in the log);
  ValueError when it cannot be read (no permission, a folder, not UTF-8, over `MAX_BYTES`, empty), which the
  hand-over treats as an unreadable ledger, as it treats one that is no JSON ledger: the eviction budget is taken as
  spent for one eviction window. gputide never writes an empty file (an empty ledger is ``{...}``), so an empty one
  was made otherwise (`touch`, a volume's file created ahead, a write cut short outside gputide) and what the last
  run spent is unknown: it is not a first start. (An empty ledger annotation on the Lease is still none: the Lease
  is not this file.)

With `--leader-elect` as well, the Lease and the file are both kept (`LedgerHandover(elector, file=...)`): a new
leader merges what it finds in both (cooldowns and evictions only restrain), saves to both, and a save counts only
once both hold the ledger. One file per controller: two controllers (two shards, a cron run beside a running one)
writing one file overwrite each other's ledger.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from pathlib import Path

from balancer.actuate.leader import LedgerNotSaved

log = logging.getLogger(__name__)
MAX_BYTES = 64 << 20   # a ledger holds its windows' entries only; a file this large is not one gputide wrote
_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)


class LedgerFile:
    """The safety ledger kept in the file `path` (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.where = f"ledger file {self.path}"   # how the hand-over's log names this store

    def load_state(self) -> str | None:
        """The ledger text last saved to the file; None when there is none yet; ValueError when it cannot be read
        or is empty."""
        try:
            with open(self.path, "rb") as fh:
                data = fh.read(MAX_BYTES + 1)
        except FileNotFoundError:
            log.info("no safety ledger file at %s yet (a first start): starting with an empty ledger", self.path)
            return None
        except OSError as exc:
            raise ValueError(f"{self.path}: {exc.strerror or exc}") from exc
        if len(data) > MAX_BYTES:
            raise ValueError(f"{self.path}: over {MAX_BYTES} bytes")
        if not data:   # not a first start (the file would be missing) and not a ledger gputide wrote
            raise ValueError(f"{self.path}: the file is empty (gputide never writes an empty ledger file)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.path}: not UTF-8 (byte {exc.start})") from exc

    def save_state(self, text: str) -> int:
        """Replace the file with `text` atomically (module docstring); 0 entries left out (a file takes them all).
        `LedgerNotSaved` when it is not written, the file left as it was."""
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(text.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            tmp = None
            _sync_folder(self.path.parent)
        except OSError as exc:
            reason = "refused" if exc.errno in _REFUSED else "error"
            raise LedgerNotSaved(reason, f"{self.path}: {exc.strerror or exc}") from exc
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        return 0


def _sync_folder(folder: Path) -> None:
    """Make the rename durable: fsync the folder (where the platform lets a folder be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):   # some file systems refuse fsync on a folder: the rename is still atomic
            os.fsync(fd)
    finally:
        os.close(fd)
