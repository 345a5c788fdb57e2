from __future__ import annotations

import os
from pathlib import Path

from engine.ingest.walk import FoundFile, SkippedFile, walk_tree


def _supported(path: str) -> bool:
    return path.endswith((".md", ".py", ".txt"))


def _walk(root: Path, max_file_bytes: int = 10_000) -> tuple[list[str], dict[str, str]]:
    found: list[str] = []
    skipped: dict[str, str] = {}
    for item in walk_tree(root, is_supported=_supported, max_file_bytes=max_file_bytes):
        if isinstance(item, FoundFile):
            found.append(item.relative_path)
        else:
            assert isinstance(item, SkippedFile)
            skipped[item.relative_path] = item.reason
    return found, skipped


def test_gitignore_at_every_level_and_default_excludes(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log.md\nsecret/\n")
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "debug.log.md").write_text("ignored\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "s.md").write_text("ignored\n")
    (tmp_path / "node_modules" / "x").mkdir(parents=True)
    (tmp_path / "node_modules" / "x" / "index.md").write_text("ignored\n")
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / ".gitignore").write_text("generated.py\n!keep.txt\n")
    (sub / "generated.py").write_text("x = 1\n")
    (sub / "mod.py").write_text("x = 1\n")
    (sub / "keep.txt").write_text("kept\n")
    (tmp_path / "other.py").write_text("generated = 1\n")  # same name elsewhere is not ignored
    (tmp_path / "image.png").write_bytes(b"\x89PNG")  # unsupported: silently not a candidate

    found, skipped = _walk(tmp_path)

    assert found == ["a.md", "other.py", "pkg/keep.txt", "pkg/mod.py"]
    assert skipped == {}


def test_binary_oversized_and_symlinks_are_skipped_with_reasons(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("# fine\n")
    (tmp_path / "blob.txt").write_bytes(b"abc\x00def")
    (tmp_path / "big.md").write_text("x" * 20_000)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.md"
    outside.write_text("# outside the root\n")
    os.symlink(outside, tmp_path / "link.md")

    found, skipped = _walk(tmp_path)

    assert found == ["ok.md"]
    assert skipped["blob.txt"] == "binary content"
    assert skipped["big.md"].startswith("oversized")
    assert skipped["link.md"].startswith("symlink")
