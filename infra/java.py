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
