"""Finding Java and building JVM command lines."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra.exceptions import MissingToolError


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
    return [
        java_executable(env),
        f"-Xmx{heap_mb}m",
        "-Djava.net.preferIPv4Stack=true",
        "-Djava.awt.headless=true",
        *jvm_options,
        "-cp",
        ":".join(classpath),
        main_class,
        *args,
    ]


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
