"""A throwaway PostgreSQL server for tests and benchmarks: initdb + pg_ctl in a temp dir.

PostgreSQL refuses to run as root, so when the caller is root the server runs as the
``postgres`` user. The binaries are looked up on ``PATH`` and in Debian's
``/usr/lib/postgresql/<version>/bin``; ``binaries="pgserver"`` takes those of the
``pgserver`` wheel instead (PostgreSQL 16 with the pgvector extension, a test tool in the
``dev`` extra), and ``bin_dir`` any other installation's ``bin`` directory.

::

    with TemporaryPostgres() as pg:
        memory = Memory(pg.url)

    with TemporaryPostgres(binaries="pgserver") as pg:   # a server with pgvector
        memory = Memory(pg.url)

:class:`TemporaryPgBouncer` puts a PgBouncer (transaction pooling) in front of such a server.
"""

from __future__ import annotations

import atexit
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal


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


_PGSERVER_COPY: Path | None = None


def pgserver_bin_dir() -> Path:
    """The ``bin`` directory of the PostgreSQL the ``pgserver`` wheel ships, in a form the
    server's user can run.

    The package is found without importing it. Run as a user other than root, the wheel's
    own files are used. As root the server runs as ``postgres``, which may not be able to
    read a virtual environment's site-packages (CI keeps its venvs under a ``mktemp -d``
    directory of mode 700): the installation is then copied, once per process, to a
    temporary directory everyone may read, removed when the process exits. The copy keeps
    the wheel's layout (``pgserver/pginstall`` beside ``pgserver.libs``) because its
    programs find their shared libraries through the relative path
    ``$ORIGIN/../../../pgserver.libs``.
    """
    global _PGSERVER_COPY
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise PostgresUnavailable(
            "the pgserver package is not installed (pip install pgserver, or the dev extra)"
        )
    package = Path(spec.origin).parent
    install = package / "pginstall"
    libs = package.parent / "pgserver.libs"
    if not (install / "bin" / "initdb").exists():
        raise PostgresUnavailable(f"pgserver has no PostgreSQL installation at {install}")
    if os.geteuid() != 0:
        return install / "bin"
    if _PGSERVER_COPY is None or not _PGSERVER_COPY.exists():
        root = Path(tempfile.mkdtemp(prefix="memory-adapters-pgserver-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        shutil.copytree(install, root / "pgserver" / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, root / "pgserver.libs", symlinks=True)
        for directory, _dirs, files in os.walk(root):
            os.chmod(directory, 0o755)
            for name in files:
                path = Path(directory) / name
                if not path.is_symlink():
                    mode = path.stat().st_mode
                    path.chmod(mode | 0o444 | (0o111 if mode & 0o100 else 0))
        _PGSERVER_COPY = root
    return _PGSERVER_COPY / "pgserver" / "pginstall" / "bin"


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

    ``binaries`` chooses the server programs: ``"system"`` (``PATH``, then Debian's
    directories) or ``"pgserver"`` (the ``pgserver`` wheel's PostgreSQL, which has pgvector:
    :func:`pgserver_bin_dir`); ``bin_dir`` names a ``bin`` directory directly.
    """

    def __init__(
        self,
        settings: dict[str, str] | None = None,
        database: str = "memory",
        *,
        password: str | None = None,
        binaries: Literal["system", "pgserver"] = "system",
        bin_dir: str | Path | None = None,
    ) -> None:
        if binaries not in ("system", "pgserver"):
            raise ValueError(f"binaries is 'system' or 'pgserver', not {binaries!r}")
        self.binaries = binaries
        self.bin_dir = Path(bin_dir) if bin_dir is not None else None
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

    def bin(self, name: str) -> str:
        """The path of server program ``name`` (``initdb``, ``pg_ctl``) this server uses."""
        if self.bin_dir is None and self.binaries == "pgserver":
            self.bin_dir = pgserver_bin_dir()
        if self.bin_dir is not None:
            path = self.bin_dir / name
            if not path.exists():
                raise PostgresUnavailable(f"{name} not found in {self.bin_dir}")
            return str(path)
        return find_bin(name)

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
                    self.bin("initdb"),
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
                self.bin("pg_ctl"),
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
            self._run(self.bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
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


class TemporaryPgBouncer:
    """Start a private PgBouncer in front of a PostgreSQL server; stop it and delete its files
    on exit.

    ``host`` / ``port`` are the server's; every database of the server is served under its own
    name, in ``pool_mode`` (``"transaction"`` by default: each transaction may run on another
    server connection, which breaks server-side prepared statements, session advisory locks
    and ``SET`` state, as most production deployments do). Clients are trusted (``auth_type =
    trust``; the server still checks them). As root PgBouncer runs as the ``postgres`` user.
    The program is ``pgbouncer`` on ``PATH`` or in ``/usr/sbin`` (Debian's ``pgbouncer``
    package); :class:`PostgresUnavailable` says so when it is missing.

    ::

        with TemporaryPostgres() as pg, TemporaryPgBouncer("127.0.0.1", pg.port) as bouncer:
            memory = Memory(bouncer.url_for(pg.database) + "?pgbouncer=true")
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        user: str = "postgres",
        password: str | None = None,
        pool_mode: str = "transaction",
        pool_size: int = 20,
    ) -> None:
        self.host = host
        self.server_port = port
        self.user = user
        self.password = password
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="memory-adapters-pgbouncer-"))
        self.log = self.dir / "pgbouncer.log"
        self._process: subprocess.Popen[bytes] | None = None

    def url_for(self, database: str) -> str:
        """A ``postgresql://`` URL of ``database`` through PgBouncer."""
        user = self.user if self.password is None else f"{self.user}:{self.password}"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def start(self) -> TemporaryPgBouncer:
        """Write the configuration, start PgBouncer and wait until it accepts connections."""
        program = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None
        )
        if program is None:
            raise PostgresUnavailable(
                "pgbouncer not found on PATH or in /usr/sbin (apt-get install pgbouncer brings it)"
            )
        secret = "" if self.password is None else self.password
        (self.dir / "users.txt").write_text(f'"{self.user}" "{secret}"\n')
        password = "" if self.password is None else f" password={self.password}"
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={self.host} port={self.server_port} user={self.user}{password}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.dir / 'users.txt'}",
                    f"pool_mode = {self.pool_mode}",
                    f"default_pool_size = {self.pool_size}",
                    "max_client_conn = 1000",
                    "ignore_startup_parameters = extra_float_digits,options",
                    f"logfile = {self.log}",
                    "",
                ]
            )
        )
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and there is no postgres user") from None
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, pw.pw_uid, pw.pw_gid)
            kwargs = {"user": pw.pw_uid, "group": pw.pw_gid}
        self._process = subprocess.Popen(
            [program, str(ini)],
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            **kwargs,
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + 30
        while True:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode() if self._process.stderr else ""
                log = self.log.read_text() if self.log.exists() else ""
                raise PostgresUnavailable(f"pgbouncer exited: {err}\n{log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise PostgresUnavailable("pgbouncer did not start listening") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop PgBouncer (the process this object started)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process is not None and process.stderr is not None:
            process.stderr.close()

    def cleanup(self) -> None:
        """Stop PgBouncer and delete its files."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> TemporaryPgBouncer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()
