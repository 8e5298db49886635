"""A throwaway PostgreSQL server for tests and benchmarks: initdb + pg_ctl in a temp dir.

PostgreSQL refuses to run as root, so when the caller is root the server runs as the
``postgres`` user. The binaries are looked up on ``PATH`` and in Debian's
``/usr/lib/postgresql/<version>/bin``.

::

    with TemporaryPostgres() as pg:
        memory = Memory(pg.url)
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries were found, or the server would not start."""


def find_bin(name: str) -> str:
    """The path of a PostgreSQL server program (``initdb``, ``pg_ctl``)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if candidates:
        return candidates[-1]
    raise PostgresUnavailable(
        f"{name} not found on PATH or in /usr/lib/postgresql/*/bin "
        "(apt-get install postgresql brings it)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class TemporaryPostgres:
    """Start a private PostgreSQL server; stop it and delete its files on exit.

    ``settings`` are extra ``-c name=value`` server settings (for example
    ``{"fsync": "off"}`` for fast tests). Connections over TCP are trusted, unless
    ``password`` is given: then they must give a password (``scram-sha-256``), the superuser
    ``postgres``'s is ``password``, and :attr:`url` holds it. (Connections through the
    server's Unix socket in its directory are always trusted.)
    """

    def __init__(
        self,
        settings: dict[str, str] | None = None,
        database: str = "memory",
        *,
        password: str | None = None,
    ) -> None:
        self.settings = settings or {}
        self.database = database
        self.password = password
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="memory-adapters-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._user: dict[str, Any] = {}
        self.started = False

    @property
    def url(self) -> str:
        """A ``postgresql://`` URL of the server's database, as the superuser ``postgres``."""
        return self.url_for(self.database)

    def url_for(self, database: str) -> str:
        """A ``postgresql://`` URL of ``database`` on the server, as the superuser."""
        user = "postgres" if self.password is None else f"postgres:{self.password}"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), check=True, capture_output=True, text=True, timeout=120, **self._user
        )

    def start(self) -> TemporaryPostgres:
        """initdb (first time only) and start the server; wait until it accepts connections."""
        if not self.data.exists():
            if os.geteuid() == 0:
                try:
                    pw = pwd.getpwnam("postgres")
                except KeyError:
                    raise PostgresUnavailable(
                        "running as root and there is no postgres user"
                    ) from None
                os.chown(self.dir, pw.pw_uid, pw.pw_gid)
                self._user = {"user": pw.pw_uid, "group": pw.pw_gid, "cwd": str(self.dir)}
            auth = ["--auth=trust"]
            if self.password is not None:
                pwfile = self.dir / "pwfile"
                pwfile.write_text(self.password + "\n")
                if self._user:
                    os.chown(pwfile, self._user["user"], self._user["group"])
                auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
            try:
                self._run(
                    find_bin("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    *auth,
                    "-E",
                    "UTF8",
                    "--locale=C",
                )
            except subprocess.CalledProcessError as exc:
                raise PostgresUnavailable(f"initdb failed: {exc.stderr}") from exc
        options = " ".join(
            [f"-p {self.port}", "-c listen_addresses=127.0.0.1", f"-k {self.dir}"]
            + [f"-c {k}={v}" for k, v in self.settings.items()]
        )
        try:
            self._run(
                find_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            )
        except subprocess.CalledProcessError as exc:
            log = self.log.read_text() if self.log.exists() else ""
            raise PostgresUnavailable(f"pg_ctl start failed: {exc.stderr}\n{log}") from exc
        self.started = True
        self._create_database()
        return self

    def _create_database(self) -> None:
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
                    exists = conn.execute(
                        "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
                    ).fetchone()
                    if not exists:
                        conn.execute(f'CREATE DATABASE "{self.database}"')
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode`` as pg_ctl's ``-m``: smart, fast or immediate)."""
        if self.started:
            self._run(find_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
            self.started = False

    def cleanup(self) -> None:
        """Stop the server and delete its files."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> TemporaryPostgres:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
