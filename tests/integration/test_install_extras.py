"""Each install (the core, and each extra) in a fresh virtualenv, without the others.

A writer-only or reader-only user installs ``tidemark`` and gets neither Spark,
pandas, PostgreSQL nor the web stack; each extra brings what its entry points
import, and nothing of the other extras. The wheel is built once from this tree
and installed with ``constraints.txt`` (what ``make setup`` pins), from pip's
cache, by the suite's own pip (``pip --python``: the venvs carry no pip), the four
installs side by side (~35 s in all).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pyspark", "delta", "pandas", "psycopg", "starlette", "uvicorn", "jinja2", "rich")

# extra -> (modules its users import, heavy packages it brings)
INSTALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "": (
        (
            "tidemark.pipelines.writing.writer",
            "tidemark.pipelines.writing.producer",
            "tidemark.pipelines.reading.group",
            "tidemark.pipelines.reading.seek",
            "tidemark.controller.delta.tables",
            "tidemark.cli.main",
        ),
        (),
    ),
    "spark": (
        ("tidemark.jobs.controller_job", "tidemark.jobs.processor", "tidemark.infra.spark"),
        ("pyspark", "delta", "pandas"),
    ),
    "timeline": (
        ("tidemark.pipelines.timeline", "tidemark.pipelines.timeline.store"),
        ("psycopg",),
    ),
    "serve": (
        ("tidemark.service.app", "tidemark.service.server"),
        ("starlette", "uvicorn", "jinja2"),
    ),
}

CHECK = textwrap.dedent(
    """
    import importlib, importlib.util, json, sys
    modules, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    for name in modules:
        importlib.import_module(name)
    print(json.dumps(sorted(h for h in heavy if importlib.util.find_spec(h) is not None)))
    """
)

pytestmark = pytest.mark.slow


def _run(*argv: str, cwd: Path) -> str:
    """``argv`` at the lowest CPU priority: building and installing is batch work, and
    the suite's other workers run services and Spark queries with deadlines meanwhile."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    argv = ("nice", "-n", "19", *argv)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _install(extra: str, wheel: Path, where: Path) -> Path:
    """A fresh venv under ``where`` with ``tidemark[extra]`` from ``wheel``; its python."""
    venv = where / (extra or "core")
    _run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=where)
    python = venv / "bin" / "python"
    requirement = (
        f"tidemark[{extra}] @ {wheel.as_uri()}" if extra else f"tidemark @ {wheel.as_uri()}"
    )
    _run(
        sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile",
        "-c", str(ROOT / "constraints.txt"), requirement,
        cwd=where,
    )  # fmt: skip
    return python


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every install's python; the installs run side by side (mostly unpacking wheels)."""
    where = tmp_path_factory.mktemp("installs")
    _run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(where), str(ROOT),
        cwd=where,
    )  # fmt: skip
    (wheel,) = where.glob("tidemark-*.whl")
    with ThreadPoolExecutor(len(INSTALLS)) as pool:
        pythons = pool.map(lambda extra: _install(extra, wheel, where), INSTALLS)
        return dict(zip(INSTALLS, pythons, strict=True))


@pytest.mark.parametrize("extra", list(INSTALLS), ids=lambda e: e or "core")
def test_an_install_imports_its_entry_points_and_pulls_nothing_else(
    extra: str, installed: dict[str, Path], tmp_path: Path
) -> None:
    modules, brought = INSTALLS[extra]
    # from tmp_path, without PYTHONPATH: the installed wheel, not this tree
    check = [str(installed[extra]), "-c", CHECK, json.dumps(modules), json.dumps(HEAVY)]
    present = json.loads(_run(*check, cwd=tmp_path))
    assert present == sorted(brought), f"tidemark[{extra}] installs {present}"


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["timeline", "count", "reminders"], "timeline"),
        (["serve"], "serve"),
        (["controller", "run", "--instance", "a"], "spark"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_a_verb_whose_extra_is_missing_names_it(
    argv: list[str], extra: str, installed: dict[str, Path], tmp_path: Path
) -> None:
    """In the core install: one line naming the extra and its install command, exit 1."""
    tidemark = installed[""].parent / "tidemark"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(tidemark), *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"needs the {extra} extra" in done.stderr
    assert f"pip install 'tidemark[{extra}]'" in done.stderr
