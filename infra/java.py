"""Finding Java and building JVM command lines.

A service JVM starts from a class-data archive of its classes (HotSpot's class data
sharing) once one exists: it loads and checks those classes from a mapped file, not
from the jars, which saves much of the CPU its start takes. The first start of a
classpath and main class writes the archive when it exits (``-XX:ArchiveClassesAtExit``,
to a pending file); its owner puts it in place after the exit (:func:`settle_archive`),
once a JVM has mapped it, so no JVM ever maps a partial archive (that one crashes).
The archives live in ``TIDEMARK_CACHE``, keyed by the JDK, the main class and the
classpath: a new JDK or a new jar makes a new one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra.exceptions import MissingToolError

log = logging.getLogger(__name__)

ARCHIVE_AT_EXIT = "-XX:ArchiveClassesAtExit="
SHARED_ARCHIVE = "-XX:SharedArchiveFile="
ARCHIVE_QUIET = (
    "-XX:+IgnoreUnrecognizedVMOptions",  # a JVM without class data sharing starts anyway
    "-Xlog:cds=off",  # writing an archive warns once for each class it leaves out
    "-Xlog:cds+dynamic=off",
)
PENDING = ".pending"
STALE_PENDING_S = 3600.0
"""A pending archive this old was left by a JVM whose owner never settled it: removed."""


def java_executable(env: Environment) -> str:
    java = shutil.which(env.java)
    if java is None:
        raise MissingToolError(
            f"Java ({env.java!r}) is not on PATH; install a JDK 17 "
            "(Debian: apt-get install openjdk-17-jdk-headless) or set TIDEMARK_JAVA"
        )
    return java


def keytool_executable(env: Environment) -> str:
    """The JDK's ``keytool``, beside its ``java``."""
    keytool = Path(os.path.realpath(java_executable(env))).with_name("keytool")
    if not keytool.exists():
        raise MissingToolError(f"no keytool in {keytool.parent}: install a full JDK 17")
    return str(keytool)


def jvm_argv(
    env: Environment,
    classpath: list[str],
    main_class: str,
    *args: str,
    heap_mb: int = 512,
    jvm_options: tuple[str, ...] = (),
) -> list[str]:
    java = java_executable(env)
    return [
        java,
        f"-Xmx{heap_mb}m",
        "-Djava.net.preferIPv4Stack=true",
        "-Djava.awt.headless=true",
        *archive_options(env, java, classpath, main_class),
        *jvm_options,
        "-cp",
        ":".join(classpath),
        main_class,
        *args,
    ]


def _archive_path(env: Environment, java: str, classpath: list[str], main_class: str) -> Path:
    home = Path(os.path.realpath(java)).parent.parent
    try:
        jdk = str((home / "lib" / "modules").stat().st_mtime_ns)  # changes with the JDK
    except OSError:
        jdk = ""
    key = "\0".join((str(home), jdk, main_class, *classpath)).encode()
    name = main_class.rsplit(".", 1)[-1]
    return env.cache / "class-archives" / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}.jsa"


def archive_options(
    env: Environment, java: str, classpath: list[str], main_class: str
) -> tuple[str, ...]:
    """The options that start a JVM from its class-data archive, or, while there is
    none, write one at its exit (to a pending file :func:`settle_archive` puts in place)."""
    archive = _archive_path(env, java, classpath, main_class)
    if archive.exists():
        return (f"{SHARED_ARCHIVE}{archive}", *ARCHIVE_QUIET)
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        for stale in archive.parent.glob(f"{archive.name}.*{PENDING}"):
            if time.time() - stale.stat().st_mtime > STALE_PENDING_S:
                stale.unlink(missing_ok=True)
    except OSError as exc:  # a read-only cache: no archive, the JVM starts as ever
        log.debug("no class-data archive under %s: %s", archive.parent, exc)
        return ()
    pending = archive.with_name(f"{archive.name}.{uuid.uuid4().hex[:12]}{PENDING}")
    return (f"{ARCHIVE_AT_EXIT}{pending}", *ARCHIVE_QUIET)


def settle_archive(argv: Sequence[str], returncode: int | None) -> None:
    """After the JVM started with ``argv`` (a :func:`jvm_argv`) exited with
    ``returncode``: the archive it wrote at its exit, if it wrote one, is put where the
    next start finds it -- once a JVM started from it has run (one killed while writing
    it leaves a partial file, and a partial archive crashes the JVM that maps it)."""
    pending = next((a[len(ARCHIVE_AT_EXIT) :] for a in argv if a.startswith(ARCHIVE_AT_EXIT)), None)
    if pending is None:
        return
    path = Path(pending)
    if not path.exists():
        return
    final = path.with_name(path.name.rsplit(".", 2)[0])
    try:
        if returncode is not None and returncode >= 0 and _maps(argv, path):
            os.replace(path, final)
            log.debug("class-data archive %s in place", final)
    finally:
        path.unlink(missing_ok=True)


def writing_no_archive(argv: Sequence[str]) -> list[str]:
    """``argv`` without the option that writes an archive at exit: for a JVM that outlives
    its owner (``tidemark up``), which would leave it pending, never settled."""
    return [a for a in argv if not a.startswith(ARCHIVE_AT_EXIT)]


def _maps(argv: Sequence[str], archive: Path) -> bool:
    """Whether a JVM with ``argv``'s classpath starts from ``archive`` and exits cleanly."""
    classpath = argv[argv.index("-cp") + 1] if "-cp" in argv else ""
    check = [
        argv[0],
        f"{SHARED_ARCHIVE}{archive}",
        *ARCHIVE_QUIET,
        "-XX:ErrorFile=/dev/null",  # a partial archive crashes it: no crash report left
        "-XX:-CreateCoredumpOnCrash",
        "-cp",
        classpath,
    ]
    try:
        done = subprocess.run([*check, "-version"], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def argfile_argv(argv: list[str], path: Path) -> list[str]:
    """``argv`` (a :func:`jvm_argv`) as ``java @path``: everything after the executable
    in a file only its owner reads, so secrets among the arguments (SCRAM passwords for
    Kafka's storage tool) are not on the process list. Each argument is quoted; one
    holding a quote or a backslash is refused (the file's syntax would change it)."""
    bad = [a for a in argv[1:] if '"' in a or "\\" in a]
    if bad:
        raise ValueError(f"{len(bad)} JVM arguments hold a quote or a backslash")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("".join(f'"{a}"\n' for a in argv[1:]))
    return [argv[0], f"@{path}"]
