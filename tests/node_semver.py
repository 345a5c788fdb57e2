"""npm's semver as a test oracle: one node child process answers batches of questions.

Used by tests/test_semver.py (quarry's semver SQL) and tests/test_versions_extract.py
(ranges emitted at ingest). Node and npm are required: without them the tests fail
rather than skip. semver is pinned in tests/semver_oracle/package.json (its grammar
tightens between minors); a bump there reinstalls it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ORACLE_DIR = Path(__file__).resolve().parent / "semver_oracle"


class SemverOracle:
    """npm's semver in a node child process, asked in batches over JSON lines."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._process = process

    def ask(self, op: str, cases: Sequence[Sequence[str]]) -> list[Any]:
        request = self._request({"op": op, "cases": [list(case) for case in cases]})
        results: list[Any] = request["results"]
        return results

    def version(self) -> str:
        return str(self._request({"op": "version"})["version"])

    def valid_ranges(self, ranges: Sequence[str]) -> list[str | None]:
        """node's normal form of each range, or None where it is invalid."""
        return [r if isinstance(r, str) else None for r in self.ask("valid", [[r] for r in ranges])]

    def satisfies(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """``semver.satisfies(version, range)`` per pair (false on invalid input, as npm answers)."""
        return [bool(answer) for answer in self.ask("matches", pairs)]

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the semver oracle exited (code {self._process.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the semver oracle failed: {answer['error']}")
        return answer


@pytest.fixture(scope="session")
def semver_oracle() -> Iterator[SemverOracle]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "node and npm must be on PATH: tests/test_semver.py checks quarry's semver SQL against npm's semver"
        )
    # semver is pinned (its grammar tightens between minors); a bump in package.json reinstalls
    wanted = json.loads((ORACLE_DIR / "package.json").read_text())["dependencies"]["semver"]
    installed = ORACLE_DIR / "node_modules" / "semver" / "package.json"
    if not installed.is_file() or json.loads(installed.read_text())["version"] != wanted:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"],
            cwd=ORACLE_DIR,
            check=True,
            timeout=300,
        )
    process = subprocess.Popen(
        [node, "oracle.js"], cwd=ORACLE_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        oracle = SemverOracle(process)
        assert oracle.version() == wanted
        yield oracle
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
