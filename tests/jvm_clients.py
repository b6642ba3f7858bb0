"""Real JVM clients for the tests: the guide's snippets, compiled with ``javac`` and run.

    source = snippet("OrdersProducer.java")        # from docs/guides/existing-producers.md
    classes = compile_java(tmp_path, source)
    run_java(classes, "OrdersProducer", props_file, topic, "1000")

The snippets are the fenced blocks of the guide that follow an HTML comment
``<!-- snippet: NAME -->``: the tests run exactly what the guide shows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tidemark.infra.jars import classpath, interceptor_jar

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "existing-producers.md"
_SNIPPET = re.compile(r"<!-- snippet: (?P<name>\S+) -->\n```\w*\n(?P<body>.*?)\n```", re.S)


def snippet(name: str, guide: Path = GUIDE) -> str:
    """The guide's snippet ``name`` (a KeyError names the ones there are)."""
    found = {m["name"]: m["body"] + "\n" for m in _SNIPPET.finditer(guide.read_text())}
    if name not in found:
        raise KeyError(f"no snippet {name!r} in {guide}; there are: {sorted(found)}")
    return found[name]


def properties(text: str, **changes: str) -> str:
    """``text`` (a properties snippet) with the values of ``changes``' keys replaced (dots
    spelled ``__``) and the keys it lacks appended."""
    wanted = {k.replace("__", "."): v for k, v in changes.items()}
    out = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in wanted:
            line = f"{key}={wanted.pop(key)}"
        out.append(line)
    out.extend(f"{k}={v}" for k, v in wanted.items())
    return "\n".join(out) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """A properties snippet's ``key=value`` lines as a mapping (comments and blanks left out)."""
    lines = (line.strip() for line in text.splitlines())
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def assert_seeks_exact(
    stream: str,
    seen: Sequence[tuple[int, int, int]],
    watermarks: Sequence[Any],
    root: str,
    store: Any,
    complete_windows: bool = True,
    writer_stopped: bool = True,
) -> None:
    """Seeks by time over the records ``seen`` (partition, offset, timestamp) and the
    ``watermarks`` folded from their writer's marks (Delta under ``root``): a start cut at
    any time skips no record at or after it; with ``complete_windows``, a complete cut at a
    watermark's time misses no record at or before it (no record was late), and, once the
    writer has stopped (a live one notes time on: a later watermark may come any moment),
    a time past the last watermark has none."""
    from tidemark.pipelines.reading.seek import complete_cut_at, stream_cut_at

    times = sorted({ts for *_, ts in seen})
    for t in [*times[:: max(1, len(times) // 40)], *(w.time for w in watermarks)]:
        cut = stream_cut_at(stream, t, delta_root=root, store=store)
        skipped = [(p, off, ts) for p, off, ts in seen if ts >= t and off < cut.get(p, 0)]
        assert skipped == [], t
    if not complete_windows:
        return
    for w in watermarks:
        cut = complete_cut_at(stream, w.time, delta_root=root)
        assert cut is not None
        missed = [(p, off, ts) for p, off, ts in seen if ts <= w.time and off >= cut.get(p, 0)]
        assert missed == [], w.time
    if writer_stopped:
        assert complete_cut_at(stream, watermarks[-1].time + 1, delta_root=root) is None


def client_classpath(groups: Sequence[str] = ("kafka",)) -> list[str]:
    """The jar groups' jars (``kafka``: kafka-clients and its dependencies; ``streams``,
    ``spring``: those clients on kafka-clients) plus the interceptor's jar."""
    return list(dict.fromkeys([*(j for g in groups for j in classpath(g)), str(interceptor_jar())]))


def compile_java(work: Path, source: str, groups: Sequence[str] = ("kafka",)) -> Path:
    """``source`` (one public class) compiled into ``work/classes`` against the jar
    ``groups`` (:func:`client_classpath`); that directory."""
    name = re.search(r"public (?:final )?class (\w+)", source)
    assert name is not None, "a snippet with one public class"
    src = work / "src" / f"{name[1]}.java"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(source)
    out = work / "classes"
    javac = shutil.which("javac")
    assert javac is not None, "javac (a JDK 17) is needed"
    done = subprocess.run(
        [javac, "-d", str(out), "-cp", ":".join(client_classpath(groups)), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def run_java(
    classes: Path,
    main: str,
    *args: str,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
    fails: bool = False,
    groups: Sequence[str] = ("kafka",),
) -> subprocess.CompletedProcess[str]:
    """Run ``main`` to its end, on the jar ``groups``; its output (a failure shows it;
    ``fails``: it must fail)."""
    java = shutil.which("java")
    assert java is not None
    done = subprocess.run(
        [java, "-Xmx256m", "-cp", ":".join([str(classes), *client_classpath(groups)]), main, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
        env=None if env is None else dict(env),
    )
    assert (done.returncode != 0) == fails, (
        f"{main}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    return done


def run_java_lines(classes: Path, main: str, lines: list[str]) -> list[str]:
    """Run ``main`` with ``lines`` on its standard input; its output's lines."""
    java = shutil.which("java")
    assert java is not None
    done = subprocess.run(
        [
            java,
            "-Xshare:auto",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            ":".join([str(classes), *client_classpath()]),
            main,
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, f"{main} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout.split("\n")[:-1]


__all__ = [
    "GUIDE",
    "assert_seeks_exact",
    "client_classpath",
    "compile_java",
    "parse_properties",
    "properties",
    "run_java",
    "run_java_lines",
    "snippet",
]
