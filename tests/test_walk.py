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


def test_symlinked_directories_are_not_entered_wherever_they_point(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("# inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# outside the root\n")
    os.symlink(outside, root / "escape")  # a directory outside the root
    os.symlink(root, root / "docs" / "loop")  # a cycle back to the root
    os.symlink(root / "docs", root / "again")  # a second path to files already walked
    (outside / "rules").write_text("docs/\n")
    os.symlink(outside / "rules", root / ".gitignore")  # not read as ignore rules either

    found, skipped = _walk(root)

    assert found == ["docs/a.md"]
    assert skipped == dict.fromkeys([".gitignore", "again", "docs/loop", "escape"], "symlink (not followed)")


def test_paths_outside_the_root_are_never_read(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("# a\n")
    (tmp_path / "secret.md").write_text("# outside\n")

    # `only` (from `git diff`) names paths relative to the root: one that climbs out matches nothing
    only = {"../secret.md", str(tmp_path / "secret.md"), "sub/../../secret.md", "sub/a.md"}
    found = [item.relative_path for item in walk_tree(root, is_supported=_supported, max_file_bytes=100, only=only)]
    assert found == ["sub/a.md"]
    # a root written with `..` is resolved first: paths are relative to it and never climb out
    found, _ = _walk(root / "sub" / ".." / "sub" / "..")
    assert found == ["sub/a.md"]


def test_special_files_are_skipped_not_read(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("# fine\n")
    os.mkfifo(tmp_path / "pipe.md")  # reading it would block the ingest forever

    found, skipped = _walk(tmp_path)

    assert found == ["ok.md"]
    assert skipped == {"pipe.md": "not a regular file"}
