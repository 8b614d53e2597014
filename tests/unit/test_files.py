"""llmtop/files.py: a cache file is replaced whole or not at all."""

from __future__ import annotations

from llmtop.files import write_atomically


def test_replaces_the_file_and_leaves_no_temporary_behind(tmp_path):
    path = tmp_path / "deep" / "cache.json"
    assert write_atomically(path, "one") and path.read_text() == "one"
    assert write_atomically(path, "two") and path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["cache.json"]


def test_an_unwritable_place_is_false_not_an_exception(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the folder should be: mkdir raises an OSError
    assert write_atomically(blocker / "cache.json", "y") is False
    assert blocker.read_text() == "x"
