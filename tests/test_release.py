"""What a release ships besides the code: a license, a changelog naming the packaged version,
documentation written for users (no team-internal wording), and one set of memory figures,
stated once beside the bench that measures them."""

import re
from pathlib import Path

import celery_fairqueue

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]
MEMORY_SECTION = "performance.md#redis-memory-per-job"


def test_the_license_is_the_bsd_3_clause_text_setup_cfg_declares():
    text = (ROOT / "LICENSE").read_text()
    assert "license = BSD-3-Clause" in (ROOT / "setup.cfg").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "celery-fairqueue contributors" in text
    assert "Neither the name of the copyright holder nor the names of its" in text


def test_the_changelog_names_the_packaged_version_first():
    releases = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert releases and releases[0] == celery_fairqueue.__version__, releases


def test_the_changelog_lists_the_contract_changes():
    text = (ROOT / "CHANGELOG.md").read_text()
    for change in ("RetryPolicy(unknown=\"retry\")", "polling_interval", "app.control.purge()",
                   "1,024 UTF-8 bytes", "`fairqueue_job_key`", "`Claim.leases`",
                   "`fairqueue_lease`", "celery_fairqueue.dlq"):
        assert change in text, change


INTERNAL = re.compile(
    r"\b(round \d|this round|last round|turn \d|this session|(?<![\w.])session(?!s?[_.\w])|WIP)\b",
    re.IGNORECASE)


def test_the_docs_speak_to_users_not_to_the_team():
    found = [f"{page.name}:{n}: {line.strip()}" for page in PAGES
             for n, line in enumerate(page.read_text().splitlines(), 1)
             if INTERNAL.search(line)]
    assert found == []


def test_memory_per_job_is_stated_once_beside_its_bench():
    figure = re.compile(
        r"\d B (of Redis memory )?per|\d bytes (for|per)|\d(\.\d+)? KB (per|for|of)")
    stated = {page.name for page in PAGES if figure.search(page.read_text())}
    assert stated == {"performance.md"}, stated
    performance = (ROOT / "docs" / "performance.md").read_text()
    section = performance.split("## Redis memory per job\n", 1)[1].split("\n## ", 1)[0]
    assert "python -m bench.memory" in section
    assert (ROOT / "bench" / "memory.py").is_file()
    for name in ("guide.md", "deployment.md", "reliability.md"):
        assert MEMORY_SECTION in (ROOT / "docs" / name).read_text(), name
