"""The repository stands on its own: no file cites documents that are not in it.

Early design notes pointed at a directory of seed documents, a survey of other queues and an
issue of a tracker, none of which ships with the repository. docs/design.md now gives that
rationale in the repository's own words, with the public articles named by title and URL; this
test keeps such pointers from coming back. The released install scripts are frozen (a released
version's SQL never changes), so their old comments stay and they are exempt.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Released scripts, frozen: the only files allowed to keep the old pointers.
FROZEN = frozenset({
    "extension/pgqueue--0.1.sql",
    "extension/pgqueue--0.1--0.2.sql",
    "extension/pgqueue--0.2--0.3.sql",
})

#: What must not be cited. Each pattern is built from pieces so that this file, which is
#: tracked too, does not match itself.
FORBIDDEN = [
    re.compile(re.escape("sha" + "red/" + "seeds"), re.IGNORECASE),
    re.compile(re.escape("land" + "scape.md"), re.IGNORECASE),
    re.compile(r"\b" + "issue" + r"\s+#?" + "4" + r"(?!\d)", re.IGNORECASE),
]


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                         capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_the_forbidden_patterns_match_what_they_are_meant_to() -> None:
    seeds, survey, issue = FORBIDDEN
    assert seeds.search("see " + "sha" + "red/seeds/001")
    assert survey.search("(" + "land" + "scape.md, failure 10)")
    assert issue.search("the targets (" + "Issue" + " 4)")
    assert issue.search("issue" + " #4")
    assert not issue.search("issue" + " 42")
    # and they find what the frozen 0.1 script still says
    frozen = (ROOT / "extension/pgqueue--0.1.sql").read_text()
    assert seeds.search(frozen) and survey.search(frozen)


def test_no_tracked_file_cites_documents_outside_the_repository() -> None:
    files = tracked_files()
    assert "README.md" in files and "docs/design.md" in files
    found = []
    for name in files:
        if name in FROZEN:
            continue
        path = ROOT / name
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for pattern in FORBIDDEN:
                if pattern.search(line):
                    found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, (
        "these lines cite documents that are not in the repository; point into docs/design.md "
        "or write the reason out instead:\n" + "\n".join(found))


def test_ci_run_finds_the_test_command_from_any_directory(tmp_path: Path) -> None:
    """.ci/run started from another directory (`cd / && repo/.ci/run`) ran "scripts/test.sh"
    relative to it: "No such file or directory", exit 127 (a review). A copy of it beside a
    stand-in test command, started from /."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / ".ci" / "run").write_text((ROOT / ".ci" / "run").read_text())
    (tmp_path / "scripts" / "test.sh").write_text('echo "the test command ran with: $*"\n')
    proc = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], cwd="/", capture_output=True, text=True,
                          timeout=60, check=False)
    assert (proc.returncode, proc.stdout) == (0, "the test command ran with: \n"), proc.stderr
