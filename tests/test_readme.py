"""The README's quick start runs as printed, and the README points only at files that exist.

The blocks marked ``<!-- quickstart: NAME -->`` are copied into a folder outside the repository
exactly as printed (only the Redis URL is swapped for a throwaway server's), the worker is
started with the printed command, the producer is run as ``python producer.py``, and what the
README says happens is checked: its printed output, one send per business key, the countdown
job waiting in Redis and then running, the permanent failure listed as a dead letter and
replayed.
"""

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery

import celery_fairqueue
from tests.harness.processes import _die_with_parent, tail, wait_until

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_REDIS_URL = "redis://127.0.0.1:6379/0"
COUNTDOWN = 30.0  # the producer's countdown=30

BLOCK = re.compile(r"<!-- quickstart: (\S+) -->\n```\w*\n(.*?)\n```", re.DOTALL)


def quickstart_blocks() -> dict[str, str]:
    blocks: dict[str, str] = {}
    for name, text in BLOCK.findall(README.read_text()):
        assert name not in blocks, f"two README blocks are marked quickstart: {name}"
        blocks[name] = text + "\n"
    return blocks


def clean_env() -> dict[str, str]:
    """The environment of a user's shell: nothing of this test run's settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST", "DJANGO_", "FAIRQUEUE_", "CELERY_", "PYTHONPATH"))}


class Worker:
    """The printed worker command, run from this interpreter's environment."""

    def __init__(self, command: str, cwd: Path, log: Path) -> None:
        argv = shlex.split(command)
        assert argv[0] == "celery", f"the worker command should start with celery: {command}"
        self.argv = [sys.executable, "-m", "celery", *argv[1:]]
        self.cwd, self.log = cwd, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=self.cwd, env={**clean_env(), "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent)

        def ready() -> bool:
            assert self.process is not None and self.process.poll() is None, (
                f"the worker exited at start:\n{self.tail()}")
            return re.search(r"@\S+ ready\.", self.text()) is not None

        assert wait_until(ready, timeout), f"worker not ready in {timeout}s:\n{self.tail()}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        return tail(self.log, 40)

    def stop(self) -> None:
        if self.process is None:
            return
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait)
                if sig == signal.SIGTERM:  # the main process is gone: kill any pool child left
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.process.pid, signal.SIGKILL)
                return


def sends_to(log: str, email: str) -> int:
    return len(re.findall(rf"provider: sent '[^']*' to {re.escape(email)}\b", log))


def matches_output(expected: str, printed: str) -> bool:
    """``<id>`` in the README's output stands for any run of non-blank characters."""
    patterns = [re.escape(line).replace(re.escape("<id>"), r"\S+")
                for line in expected.splitlines()]
    lines = printed.splitlines()
    return len(lines) == len(patterns) and all(
        re.fullmatch(pattern, line) for pattern, line in zip(patterns, lines, strict=True))


def test_the_quickstart_blocks_are_marked_and_the_app_module_enqueues_nothing():
    blocks = quickstart_blocks()
    assert set(blocks) == {"proj.py", "worker", "producer.py", "output"}
    # a worker imports proj.py: enqueueing there would send jobs from every worker start
    assert ".delay(" not in blocks["proj.py"] and ".apply_async(" not in blocks["proj.py"]
    assert README_REDIS_URL in blocks["proj.py"]
    assert len(blocks["worker"].strip().splitlines()) == 1


@pytest.mark.slow
def test_the_quickstart_runs_as_printed(redis_server_factory, tmp_path):
    blocks = quickstart_blocks()
    server = redis_server_factory()
    project = tmp_path / "quickstart"
    project.mkdir()
    for name in ("proj.py", "producer.py"):
        (project / name).write_text(blocks[name].replace(README_REDIS_URL, server.url))
    worker = Worker(blocks["worker"].strip(), project, tmp_path / "worker.log")
    try:
        worker.start()
        started = time.monotonic()
        producer = subprocess.run([sys.executable, "producer.py"], cwd=project, env=clean_env(),
                                  capture_output=True, text=True, timeout=90)
        assert producer.returncode == 0, producer.stdout + producer.stderr + worker.tail()
        # 1. The producer printed what the README shows: the duplicate .delay() returned the
        #    same job, both jobs' results came back, the countdown job still waits, the
        #    permanent failure was listed as a dead letter and replayed.
        assert matches_output(blocks["output"], producer.stdout), (
            f"printed:\n{producer.stdout}\nREADME:\n{blocks['output']}")
        replayed = re.search(r"^replayed as (\S+)$", producer.stdout, re.MULTILINE)[1]

        # 2. The replay ran the same task with the same arguments again; the lead is still
        #    missing, so it is a dead letter again (and the replayed letter is gone).
        assert wait_until(lambda: f"send_step[{replayed}] dead-lettered" in worker.text(), 15), (
            worker.tail())
        dead_ids = re.findall(r"send_step\[(\S+)\] dead-lettered", worker.text())
        assert len(dead_ids) == 2 and dead_ids[1] == replayed, dead_ids
        check = Celery("readme-check", broker=server.url, backend=server.url)
        letters = celery_fairqueue.DeadLetters(check).list()
        assert [(letter.job_id.split(":")[0], letter.account, letter.args, letter.reason)
                for letter in letters] == [
            (replayed, "acme", ["acme", 404, "intro", 3], "permanent: lead deleted")]

        # 3. One message per business key; the explicit account ran the "other" lead.
        log = worker.text()
        assert sends_to(log, "ada@example.com") == 1, log
        assert sends_to(log, "linus@example.com") == 1, log
        limit = celery_fairqueue.get_account_limit(check, "acme")
        assert limit is not None and (limit.rate, limit.burst, limit.concurrency) == (
            "10/s", 10, 2)
        globex = celery_fairqueue.get_account_limit(check, "globex")
        assert globex is not None and (globex.window, globex.tz) == (
            "09:00-17:00", "Europe/Berlin")

        # 4. The countdown job waits in Redis (the CLI the README names lists it) and does not
        #    run before its countdown; then it runs, once.
        scheduled = subprocess.run(
            [sys.executable, "-m", "celery", "-A", "proj", "fairqueue", "scheduled"],
            cwd=project, env=clean_env(), capture_output=True, text=True, timeout=60)
        assert scheduled.returncode == 0, scheduled.stderr
        [row] = [line for line in scheduled.stdout.splitlines() if "proj.send_step" in line]
        assert " acme " in row, scheduled.stdout
        not_before = started + COUNTDOWN - 2.0  # the producer enqueued it after `started`
        while time.monotonic() < not_before:
            assert sends_to(worker.text(), "grace@example.com") == 0, (
                f"the countdown job ran {time.monotonic() - started:.1f}s after the producer "
                f"started\n{worker.tail()}")
            time.sleep(0.2)
        assert wait_until(lambda: sends_to(worker.text(), "grace@example.com") == 1, 25), (
            worker.tail())
    finally:
        worker.stop()


# --------------------------------------------------------------------------------------------
# Links and paths
# --------------------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in path.read_text().splitlines()
            if line.startswith("#")}


def prose(text: str) -> str:
    """The README without its fenced code blocks (the quick start's files are the user's)."""
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


def test_readme_links_point_at_files_in_the_repository():
    links = LINK.findall(README.read_text())
    assert links, "no links found: the pattern is broken"
    for target in links:
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            assert anchor in anchors(ROOT / path), f"README links to a missing anchor: {target}"


def test_readme_paths_modules_and_make_targets_exist():
    text = prose(README.read_text())
    spans = CODE.findall(text)
    paths = [s for s in spans if "/" in s and " " not in s and "://" not in s]
    assert "docs/guide.md" in paths
    for path in paths:
        assert (ROOT / path).exists(), f"README names {path}, which is not in the repository"
    # dotted names of this package: a module, or a name (or permission codename) defined in it
    sources = "\n".join(p.read_text() for p in (ROOT / "celery_fairqueue").rglob("*.py"))
    for name in {s for s in spans if re.fullmatch(r"celery_fairqueue(\.\w+)+", s)}:
        base = ROOT.joinpath(*name.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()):
            assert re.search(rf"\b{base.name}\b", sources), f"README names {name}: not found"
    for module in re.findall(r"python -m ([\w.]+)", text):
        base = ROOT.joinpath(*module.split("."))
        assert base.with_suffix(".py").is_file() or (base / "__main__.py").is_file(), (
            f"README runs python -m {module}, which is not in the repository")
    makefile = (ROOT / "Makefile").read_text()
    targets = {m[1] for s in spans if (m := re.fullmatch(r"make (\w+)", s))}
    targets |= set(re.findall(r"^make (\w+)", README.read_text(), re.MULTILINE))
    assert {"demo", "test", "lint"} <= targets
    for target in targets:
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no make target {target}"
    example = ROOT / "example_project"
    for dotted in re.findall(r"`(automations\.[\w.]+)`", text):
        module, _, attribute = dotted.rpartition(".")
        source = example.joinpath(*module.split(".")).with_suffix(".py")
        assert re.search(rf"^def {attribute}\(", source.read_text(), re.MULTILINE), dotted
