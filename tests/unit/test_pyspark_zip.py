"""tidemark.infra.pyspark_zip: bytecode beside the sources of a zip on a Python path."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tidemark.infra.pyspark_zip import compile_zip, installed_zip, is_compiled

pytestmark = pytest.mark.unit

SOURCES = {
    "pkg/__init__.py": "VALUE = 1\n",
    "pkg/mod.py": "def twice(x):\n    return 2 * x\n",
    "pkg/data.txt": "not python\n",
}


def archive(tmp_path: Path, extra: dict[str, bytes | str] | None = None) -> Path:
    path = tmp_path / "lib.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in {**SOURCES, **(extra or {})}.items():
            zf.writestr(name, text)
    return path


def imported_from(path: Path) -> list[str]:
    """In a fresh interpreter with only ``path`` added: where pkg and pkg.mod came from."""
    code = (
        "import pkg, pkg.mod; assert pkg.mod.twice(pkg.VALUE) == 2; "
        "print(pkg.__file__); print(pkg.mod.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(path)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


def test_modules_load_from_the_added_bytecode_and_a_second_run_does_nothing(tmp_path):
    path = archive(tmp_path)
    assert [Path(f).name for f in imported_from(path)] == ["__init__.py", "mod.py"]
    assert not is_compiled(path)
    assert compile_zip(path) == 2
    assert is_compiled(path)
    with zipfile.ZipFile(path) as zf:
        assert zf.read("pkg/data.txt") == b"not python\n"  # everything else kept as it was
        assert set(zf.namelist()) == {*SOURCES, "pkg/__init__.pyc", "pkg/mod.pyc"}
    assert [Path(f).name for f in imported_from(path)] == ["__init__.pyc", "mod.pyc"]
    assert compile_zip(path) == 0
    assert not list(tmp_path.glob(".pyspark-*"))  # no temporary file left


def test_another_python_s_bytecode_is_renewed_and_a_broken_module_keeps_its_source(tmp_path):
    stale = b"\x00\x00\x0d\x0a" + bytes(12)  # a magic number no Python here writes
    path = archive(tmp_path, {"pkg/__init__.pyc": stale, "pkg/broken.py": "def (:\n"})
    assert not is_compiled(path)
    assert compile_zip(path) == 2
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        assert zf.read("pkg/__init__.pyc")[:4] == importlib.util.MAGIC_NUMBER
    assert "pkg/broken.py" in names and "pkg/broken.pyc" not in names
    assert names.count("pkg/__init__.pyc") == 1
    assert [Path(f).name for f in imported_from(path)] == ["__init__.pyc", "mod.pyc"]


def test_the_installed_zip_is_the_one_spark_puts_on_its_workers_path():
    path = installed_zip()
    assert path.name == "pyspark.zip" and path.parent.name == "lib"
    assert path.is_file()


def test_the_command_compiles_the_archives_it_is_given(tmp_path):
    from tidemark.infra.pyspark_zip import main

    path = archive(tmp_path)
    assert main([str(path)]) == 0
    assert is_compiled(path)
