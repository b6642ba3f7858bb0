"""JVM artifacts: resolved by Maven at setup time, read as classpaths at run time.

    python -m tidemark.infra.jars resolve     # make setup runs this; quick when done
    python -m tidemark.infra.jars resolve kafka zookeeper spark   # make demo: only these groups
    # what spark-submit --jars takes (docs/deploying.md)
    python -m tidemark.infra.jars spark-jars s3a
    classpath("kafka")               # -> list of jar paths in ~/.m2
    python -m tidemark.infra.jars interceptor --log LOG   # make setup: the JVM interceptor
    interceptor_jar()                # -> the interceptor's jar (built from jvm/)

Each group (``kafka``, ``zookeeper``, ``spark``, ``s3proxy``: the object store of the
deployment tests, ``s3a``: Spark's ``s3a://`` file system; for the JVM interceptor's
tests ``connect``: a Kafka Connect worker with the file connectors, ``streams``: Kafka
Streams, ``spring``: Spring for Apache Kafka) is a small pom under
``infra/maven/``. Maven resolves it into the user's Maven repository and
writes the classpath to the tidemark cache, in a file named after a hash of
the pom, so a changed pom is resolved again and nothing is fetched at test
time.

The JVM producer interceptor (the Maven module in ``jvm/``) is built by
:func:`build_interceptor` into one jar, cached under a name made of a hash of
the module's sources, so it is built again only when they change.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra.exceptions import MissingToolError, ServiceError, SetupRequiredError

log = logging.getLogger(__name__)

MAVEN_DIR = Path(__file__).resolve().parent / "maven"
JVM_MODULE = Path(__file__).resolve().parent.parent / "jvm"
INTERCEPTOR_CLASS = "dev.tidemark.kafka.TidemarkInterceptor"
GROUPS = ("kafka", "zookeeper", "spark", "s3proxy", "s3a", "connect", "streams", "spring")
_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")


def _pom(group: str) -> Path:
    if group not in GROUPS:
        raise ValueError(f"unknown jar group {group!r}; valid: {', '.join(GROUPS)}")
    return MAVEN_DIR / f"{group}.xml"


def _classpath_file(group: str, env: Environment) -> Path:
    digest = hashlib.sha256(_pom(group).read_bytes()).hexdigest()[:16]
    return env.cache / "classpath" / f"{group}-{digest}.txt"


def resolve(env: Environment | None = None, groups: tuple[str, ...] = GROUPS) -> None:
    """Resolve each group with Maven unless its classpath file is current."""
    env = env or Environment.from_env()
    mvn = shutil.which(env.maven)
    for group in groups:
        target = _classpath_file(group, env)
        if target.exists() and all(Path(j).exists() for j in _read(target)):
            continue
        if mvn is None:
            raise MissingToolError(
                f"Maven ({env.maven!r}) is not on PATH; install Maven 3.8+ "
                "(Debian: apt-get install maven) and run `make setup` again"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            mvn,
            "-q",
            "-B",
            "-s",
            str(MAVEN_DIR / "settings.xml"),
            "-f",
            str(_pom(group)),
            "dependency:build-classpath",
            f"-Dmdep.outputFile={target}",
        ]
        log.info("resolving the %s jars with Maven (first use only)", group)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            target.unlink(missing_ok=True)
            raise ServiceError(
                f"Maven could not resolve the {group} jars ({_pom(group)}):\n"
                + "\n".join(line for line in done.stdout.splitlines() if "ERROR" in line)[:4000]
            )


def _read(path: Path) -> list[str]:
    return [p for p in path.read_text().strip().split(":") if p]


def classpath(group: str, env: Environment | None = None) -> list[str]:
    """The jars of ``group``; raises :class:`SetupRequiredError` before ``make setup``."""
    env = env or Environment.from_env()
    path = _classpath_file(group, env)
    if not path.exists():
        raise SetupRequiredError(
            f"the {group} jars are not resolved ({path} is missing); run `make setup`"
        )
    return _read(path)


def artifact_name(jar: str) -> str:
    """``/x/kafka-clients-3.9.1.jar`` -> ``kafka-clients``."""
    name = Path(jar).name
    match = _VERSIONED_JAR.match(name)
    return match.group("artifact") if match else name


def spark_extra_jars(
    env: Environment | None = None, groups: tuple[str, ...] = ("spark",)
) -> list[str]:
    """The jars of ``groups`` (the Spark packages; with ``s3a``, also Spark's ``s3a://``
    file system) minus the artifacts pyspark already ships."""
    # pyspark: only a Spark session needs this; Kafka and ZooKeeper use this module too
    import pyspark

    shipped = {
        artifact_name(j.name) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")
    }
    found = [j for group in groups for j in classpath(group, env)]
    return list(dict.fromkeys(j for j in found if artifact_name(j) not in shipped))


def _module_files() -> list[Path]:
    return sorted([JVM_MODULE / "pom.xml", *(JVM_MODULE / "src").rglob("*")], key=lambda p: str(p))


def _interceptor_target(env: Environment) -> Path:
    digest = hashlib.sha256()
    for path in _module_files():
        if path.is_file():
            digest.update(str(path.relative_to(JVM_MODULE)).encode() + b"\0" + path.read_bytes())
    return env.cache / "jars" / f"tidemark-kafka-interceptor-{digest.hexdigest()[:16]}.jar"


def build_interceptor(env: Environment | None = None, log_file: Path | None = None) -> Path:
    """Build the JVM interceptor's jar with Maven unless the cached one is current; its path.

    Maven's output goes to ``log_file`` (else it is kept only when the build fails)."""
    env = env or Environment.from_env()
    target = _interceptor_target(env)
    if target.exists():
        return target
    mvn = shutil.which(env.maven)
    if mvn is None:
        raise MissingToolError(
            f"Maven ({env.maven!r}) is not on PATH; install Maven 3.8+ "
            "(Debian: apt-get install maven) and run `make setup` again"
        )
    log.info("building the JVM producer interceptor (jvm/) with Maven")
    argv = [mvn, "-q", "-B", "-s", str(MAVEN_DIR / "settings.xml"), "-f", str(JVM_MODULE)]
    done = subprocess.run(
        [*argv, "package"], capture_output=True, text=True, check=False, cwd=JVM_MODULE
    )
    if log_file is not None:
        with log_file.open("a") as out:
            out.write(done.stdout + done.stderr)
    built = JVM_MODULE / "target" / "tidemark-kafka-interceptor.jar"
    if done.returncode != 0 or not built.exists():
        raise ServiceError(
            f"Maven could not build the JVM interceptor ({JVM_MODULE}):\n"
            + "\n".join(line for line in done.stdout.splitlines() if "ERROR" in line)[:4000]
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    shutil.copyfile(built, partial)
    partial.replace(target)  # whole or absent, for a run reading it meanwhile
    return target


def interceptor_jar(env: Environment | None = None) -> Path:
    """The JVM producer interceptor's jar (``interceptor.classes=`` :data:`INTERCEPTOR_CLASS`);
    raises :class:`SetupRequiredError` when it is not built for the current sources."""
    env = env or Environment.from_env()
    path = _interceptor_target(env)
    if not path.exists():
        raise SetupRequiredError(
            f"the JVM interceptor's jar is not built for the current jvm/ sources ({path} is "
            "missing); run `make setup`"
        )
    return path


USAGE = f"""usage: python -m tidemark.infra.jars resolve [GROUP ...]   # groups: {" ".join(GROUPS)}
       python -m tidemark.infra.jars spark-jars [s3a]   # spark-submit --jars, comma-separated
       python -m tidemark.infra.jars interceptor [--log FILE]   # build the JVM interceptor"""


def main(argv: list[str]) -> int:
    if argv[:1] == ["resolve"] and set(argv[1:]) <= set(GROUPS):
        logging.basicConfig(level=logging.INFO, format="setup: %(message)s")
        resolve(groups=tuple(argv[1:]) or GROUPS)
        return 0
    if argv[:1] == ["interceptor"] and (len(argv) == 1 or (len(argv) == 3 and argv[1] == "--log")):
        logging.basicConfig(level=logging.INFO, format="setup: %(message)s")
        build_interceptor(log_file=Path(argv[2]) if len(argv) == 3 else None)
        return 0
    if argv[:1] == ["spark-jars"] and set(argv[1:]) <= {"s3a"}:
        print(",".join(spark_extra_jars(groups=("spark", *argv[1:]))))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
