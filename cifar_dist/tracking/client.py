"""The MLflow client for a tracking URI, and whether a run is still there: what store.py and sweep_parent.py share.

A SQLite store is bounded in time like a server (``tracking.http_*``): the
file is opened once by ``sqlite3`` before MLflow sees it, so a store that
cannot be opened costs one error (one warning from the guard), not MLflow's
ten engine retries with backoff (~100 s, three lines each). And a new file's
tables are created once: MLflow creates them when a client first opens the
store, so clients of one SQLite file are made under a file lock beside it
(two first runs would otherwise both create them, and one fails with
``duplicate column name``).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
from pathlib import Path
from typing import Iterator

from cifar_dist.common.uri_userinfo import well_formed
from cifar_dist.tracking.settings import sqlite_path

OPEN_TIMEOUT_S = 10.0  # how long sqlite3 waits for another writer's lock while probing


class StoreUnavailable(Exception):
    """The tracking store cannot be opened; the message says which file and why."""


def client_for(uri: str):
    """The client of ``uri``; a server's URI with its ``user:password@`` percent-encoded, as the user may not have
    typed it (a raw ``/`` in a password would move the host: ``common/uri_userinfo.py``)."""
    from mlflow.tracking import MlflowClient  # lazy: MLflow

    path = sqlite_path(uri)
    if path is None:
        return MlflowClient(tracking_uri=well_formed(uri))
    with schema_lock(path):
        probe_sqlite(path)
        return MlflowClient(tracking_uri=uri)  # creates the tables of a new file, under the lock


def probe_sqlite(path: Path) -> None:
    """Open the SQLite file and read its schema version: raise StoreUnavailable at once when that fails."""
    try:
        connection = sqlite3.connect(str(path), timeout=OPEN_TIMEOUT_S)
        try:
            connection.execute("PRAGMA schema_version").fetchone()
        finally:
            connection.close()
    except (sqlite3.Error, OSError) as exc:
        raise StoreUnavailable(f"cannot open the SQLite store {path}: {exc}") from None


@contextlib.contextmanager
def schema_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``<db>.lock`` beside the store (none where the file system has no locks)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path.with_name(path.name + ".lock"), "a")
    except OSError as exc:
        raise StoreUnavailable(f"cannot open the SQLite store {path}: {exc}") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        except OSError:
            pass  # a file system without flock: as before, no worse
        yield


def run_exists(client, run_id: str) -> bool:
    from mlflow.exceptions import MlflowException  # lazy: MLflow

    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException:
        return False
