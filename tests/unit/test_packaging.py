"""Installed, the project is one import name, ``tidemark``: the repository's folders are
its subpackages (``controller/`` is ``tidemark.controller``), mapped in ``pyproject.toml``.

The wheel is built and installed into a folder of its own, and imported from there
with the repository out of the path: what a user's ``pip install`` gives.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("controller", "pipelines", "schemas", "jobs", "infra")


def _config() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]  # type: ignore[no-any-return]


def _packages_on_disk() -> set[str]:
    found = set()
    for top in ("tidemark", *FOLDERS):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = list(init.parent.relative_to(ROOT).parts)
            if parts[0] != "tidemark":
                parts.insert(0, "tidemark")
            found.add(".".join(parts))
    return found


@pytest.mark.unit
def test_every_package_folder_is_listed_under_tidemark():
    config = _config()
    assert set(config["packages"]) == _packages_on_disk()  # type: ignore[arg-type]
    assert config["package-dir"] == {  # type: ignore[comparison-overlap]
        "tidemark": "tidemark",
        **{f"tidemark.{folder}": folder for folder in FOLDERS},
    }


@pytest.mark.unit
def test_no_module_imports_a_folder_by_its_bare_name():
    import ast

    offenders = []
    for top in ("tidemark", *FOLDERS, "tests"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                    for name in names
                    if name.split(".")[0] in FOLDERS
                ]
    assert offenders == [], "import them as tidemark.<folder>: " + ", ".join(offenders)


@pytest.mark.slow
def test_the_wheel_installs_one_top_level_name_and_imports_from_it(tmp_path: Path):
    # Built from a copy: setuptools keeps build/lib between builds, and a module since
    # moved away would still be in a wheel built in the checkout.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "*.egg-info", "__pycache__", "site"
        ),
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("tidemark-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"tidemark"}
    for data in (
        "tidemark/schemas/versions/",
        "tidemark/infra/maven/kafka.xml",
        "tidemark/service/templates/",
    ):
        assert any(name.startswith(data) for name in names), data

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "-t", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = (
        "import tidemark.controller.model, tidemark.schemas.codec, tidemark.jobs, "
        "tidemark.infra.jars, tidemark.pipelines.writing.writer, tidemark.cli.main\n"
        "from tidemark import EventWriter, ReaderGroup, stream_cut_at, complete_cut_at\n"
        "from tidemark.schemas.records import WriterMarkRecord\n"
        "import tidemark.controller.model as m\n"
        "print(m.__file__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,  # not the repository: nothing found beside the checkout
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.strip().startswith(str(target / "tidemark" / "controller"))
