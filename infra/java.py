"""Finding Java and building JVM command lines."""

from __future__ import annotations

import shutil

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
