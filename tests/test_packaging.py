"""What ships: ``python -m build`` makes an sdist and a wheel that hold the package's data files
(Lua scripts, Django templates and migrations, ``py.typed``) and the declared dependencies.

The build runs on a copy of the repository's files (tracked, and new ones not ignored), so it
writes nothing into the working tree. The build backend is installed in an isolated environment
by ``build`` itself, from the package index.
"""

import email.parser
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "celery_fairqueue"

# one xdist worker builds the wheel and the sdist once for all of them (the module's fixture)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]


def _data_files() -> set[str]:
    """Package-relative paths (``celery_fairqueue/...``) of every file that must ship."""
    patterns = [
        "store/scripts/*.lua",
        "store/scripts/lib/*.lua",
        "contrib/django/templates/**/*.html",
        "contrib/django/migrations/*.py",
        "py.typed",
    ]
    found = {
        path.relative_to(ROOT).as_posix()
        for pattern in patterns
        for path in PACKAGE.glob(pattern)
        if path.is_file()
    }
    return found


IGNORED = (".git", ".venv", ".tox", "build", "dist", "*.egg-info", "__pycache__", "*.py[cod]",
           ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis")


def _repository_files() -> list[str]:
    """The files of a clean checkout: git's tracked and new unignored files (or, outside a git
    work tree, everything but environments, caches and build output)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        ignored = shutil.ignore_patterns(*IGNORED)
        names: list[str] = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = sorted(set(dirs) - ignored(folder, dirs))
            relative = Path(folder).relative_to(ROOT)
            kept = sorted(set(files) - ignored(folder, files))
            names += [(relative / name).as_posix() for name in kept]
        return names
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    source = tmp_path_factory.mktemp("source")
    for name in _repository_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    run = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(out), str(source)],
        capture_output=True, text=True, timeout=240,
    )
    assert run.returncode == 0, f"python -m build failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_data_files_exist_in_the_repository():
    files = _data_files()
    assert "celery_fairqueue/py.typed" in files
    assert any(f.endswith("store/scripts/claim.lua") for f in files)
    assert any(f.endswith("store/scripts/lib/rotation.lua") for f in files)
    assert any("/templates/admin/celery_fairqueue/" in f for f in files)
    assert "celery_fairqueue/contrib/django/migrations/0001_initial.py" in files


def test_the_wheel_holds_the_data_files_and_only_the_package(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
    assert _data_files() - names == set()
    top = {name.split("/")[0] for name in names}
    assert top == {"celery_fairqueue", built["wheel"].name.split("-py3")[0] + ".dist-info"}


def test_the_sdist_holds_the_data_files_and_what_a_rebuild_needs(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert _data_files() - names == set()
    assert {"setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md"} <= names


def test_the_wheel_declares_the_redis_transport_and_a_separate_postgres_extra(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        headers = email.parser.Parser().parsestr(wheel.read(metadata).decode())
    requires = [r.replace(" ", "") for r in headers.get_all("Requires-Dist")]
    # kombu's redis transport imports `packaging` and needs a matching redis-py: its extra
    assert any(r.startswith("celery[redis]") for r in requires), requires
    psycopg = [r for r in requires if r.startswith("psycopg")]
    assert psycopg and all('extra=="postgres"' in r for r in psycopg), psycopg
    assert "postgres" in headers.get_all("Provides-Extra")


def test_the_sdist_and_the_wheel_carry_the_license_and_the_changelog(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"LICENSE", "CHANGELOG.md"} <= names
    with zipfile.ZipFile(built["wheel"]) as wheel:
        licenses = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert licenses, wheel.namelist()
        assert "BSD 3-Clause" in wheel.read(licenses[0]).decode()
        [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        headers = email.parser.Parser().parsestr(wheel.read(metadata).decode())
    assert headers["License-File"] == "LICENSE"
    # the changelog is part of the long description: PyPI's page shows it under the README
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.split("\n## ")[1].splitlines()[0] in headers.get_payload()


def test_twine_accepts_the_sdist_and_the_wheel(built):
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(built["sdist"]),
         str(built["wheel"])], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
