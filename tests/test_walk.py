from __future__ import annotations

import os
from pathlib import Path

from engine.ingest.parsers import is_supported
from engine.ingest.walk import FoundFile, SkippedFile, walk_tree


def _supported(path: str) -> bool:
    return path.endswith((".md", ".py", ".txt", ".gitignore", ".quarryignore"))


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
    (tmp_path / "image.png").write_bytes(b"\x89PNG")  # unsupported: not a candidate, but counted

    found, skipped = _walk(tmp_path)

    assert found == [".gitignore", "a.md", "other.py", "pkg/.gitignore", "pkg/keep.txt", "pkg/mod.py"]
    # every file left out is accounted for; a folder left out whole is one entry
    assert skipped == {
        "debug.log.md": "ignored by .gitignore",
        "secret/": "ignored by .gitignore",
        "node_modules/": "excluded folder (build output, dependencies or tool cache)",
        "pkg/generated.py": "ignored by pkg/.gitignore",
        "image.png": "unsupported file type (.png)",
    }


def test_quarryignore_leaves_out_what_git_tracks(tmp_path: Path) -> None:
    (tmp_path / ".quarryignore").write_text("fixtures/\n*.draft.md\n")
    (tmp_path / "a.md").write_text("# A\n")
    (tmp_path / "notes.draft.md").write_text("# not yet\n")
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "big.md").write_text("# data\n")

    found, skipped = _walk(tmp_path)

    assert found == [".quarryignore", "a.md"]
    assert skipped == {"fixtures/": "ignored by .quarryignore", "notes.draft.md": "ignored by .quarryignore"}


def test_generated_files_are_skipped_with_a_reason(tmp_path: Path) -> None:
    for name in ("app.min.js", "package-lock.json", "pnpm-lock.yaml", "poetry.lock", "app.js.map"):
        (tmp_path / name).write_text("{}\n")

    _, skipped = _walk(tmp_path)

    assert set(skipped) == {"app.min.js", "package-lock.json", "pnpm-lock.yaml", "poetry.lock", "app.js.map"}
    assert set(skipped.values()) == {"generated file (lock file, minified bundle or compiled output)"}


def test_a_large_configuration_format_file_is_data_and_skipped(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text('{"debug": true}\n')
    (tmp_path / "tokenizer.json").write_text('{"vocab": {' + ", ".join(f'"w{n}": {n}' for n in range(20_000)) + "}}\n")

    items = list(walk_tree(tmp_path, is_supported=is_supported, max_file_bytes=1_000_000))

    assert [item.relative_path for item in items if isinstance(item, FoundFile)] == ["settings.json"]
    (skipped,) = [item for item in items if isinstance(item, SkippedFile)]
    assert skipped.relative_path == "tokenizer.json" and skipped.reason.startswith("data file (")


def test_a_single_file_is_a_tree_holding_only_itself(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / ".gitignore").write_text("*.md\n")  # named on purpose: no ignore rule applies
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")

    assert _walk(tmp_path / "docs" / "guide.md") == (["guide.md"], {})
    assert _walk(tmp_path / "photo.png") == ([], {"photo.png": "unsupported file type (.png)"})
    assert _walk(tmp_path / "docs" / "guide.md", max_file_bytes=3)[1]["guide.md"].startswith("oversized")


def test_incremental_walks_report_named_files_inside_left_out_folders(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("out/\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.md").write_text("# generated\n")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "readme.md").write_text("# dependency\n")
    (tmp_path / "a.md").write_text("# A\n")

    only = {"a.md", "out/report.md", "node_modules/readme.md"}
    items = list(walk_tree(tmp_path, is_supported=_supported, max_file_bytes=100, only=only))

    assert [item.relative_path for item in items if isinstance(item, FoundFile)] == ["a.md"]
    assert {item.relative_path: item.reason for item in items if isinstance(item, SkippedFile)} == {
        "node_modules/readme.md": "excluded folder (build output, dependencies or tool cache)",
        "out/report.md": "ignored by .gitignore",
    }


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
