"""The runner of ``make compat`` (tools/compat/run.py) tests this checkout's package."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compat_run_imports_this_checkouts_celery_fairqueue_from_the_sdist_folder(tmp_path):
    spec = importlib.util.spec_from_file_location("compat_run",
                                                  ROOT / "tools" / "compat" / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run  # dataclasses look their module up
    spec.loader.exec_module(run)
    # the pytest processes run in the unpacked sdist, where the worktree is not on the path
    found = subprocess.run(
        [sys.executable, "-c", "import celery_fairqueue, compat_plugin; "
                               "print(celery_fairqueue.__file__)"],
        cwd=tmp_path, env=run.child_env(), capture_output=True, text=True, check=True)
    assert Path(found.stdout.strip()).parent == ROOT / "celery_fairqueue"
