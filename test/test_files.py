"""continuous_test/wire/files.py: report files written in place of what is not a regular file, paths
checked when a run starts, and file names cut to the file system's limit in bytes."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from continuous_test.errors import ConfigError
from continuous_test.wire import files, kept


def _is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


def test_dev_null_is_written_and_stays_a_device():
    files.write_text(os.devnull, "{}\n")
    assert _is_char_device(os.devnull)
    assert _is_char_device("/dev/full")  # never written here: only checked to be the device it was


def test_a_symlink_is_written_through_and_kept(tmp_path):
    target = tmp_path / "real" / "report.json"
    target.parent.mkdir()
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "report.json"
    link.symlink_to(target)
    files.write_text(str(link), "new")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new" and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(os.listdir(target.parent)) == ["report.json"]  # no temporary file left


def test_a_dangling_symlink_makes_its_target(tmp_path):
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "made.json")
    files.write_text(str(link), "new")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "new"


def test_a_fifo_is_written_in_place_for_its_reader(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text()), daemon=True)
    reader.start()
    files.write_text(str(fifo), "through the pipe\n")
    reader.join(10)
    assert read == ["through the pipe\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_regular_file_is_replaced_whole_with_the_umask_mode(tmp_path):
    path = tmp_path / "sub" / "report.json"
    mask = os.umask(0o022)
    try:
        files.write_text(str(path), "x")
    finally:
        os.umask(mask)
    assert path.read_text() == "x" and stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_dev_stdout_is_written_where_it_leads(tmp_path, capfd):
    files.write_text("/dev/stdout", "to the terminal\n")
    assert "to the terminal" in capfd.readouterr().out and os.path.islink("/dev/stdout")


@pytest.mark.parametrize("path, why", [("/proc/version/x.json", "/proc/version is not a directory"),
                                       ("{tmp}", "it is a directory"),
                                       ("{tmp}/", "it names a directory"),
                                       ("{tmp}/file/x.json", "is not a directory")])
def test_an_unwritable_path_names_the_option_and_why(tmp_path, path, why):
    (tmp_path / "file").write_text("")
    path = path.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as caught:
        files.check(path, "the --ct-report option")
    message = str(caught.value)
    assert message.startswith(f"the --ct-report option: cannot write {path!r}: ") and why in message, message


def test_a_good_path_is_made_absolute_and_nothing_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert files.check("out/r.json", "the --ct-report option") == str(tmp_path / "out" / "r.json")
    assert files.check(os.devnull, "x") == os.devnull
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("text", ["测试名称很长" * 60, "é" * 300, "a" * 300, "𝔘" * 100])
def test_name_parts_fit_the_limit_in_bytes_without_splitting_a_character(text):
    part = files.name_part(text, 200)
    assert len(part.encode("utf-8")) <= 200 and text.startswith(part) and part


def test_kept_texts_with_long_non_ascii_names_are_written(tmp_path, monkeypatch):
    monkeypatch.setattr(kept, "_dir", str(tmp_path / "kept"))
    name = "测试" * 100
    first = kept.save("whole", name, ".rank0.log")
    second = kept.save("again", name, ".rank0.log")  # the same name again: a new file beside it
    assert open(first).read() == "whole" and open(second).read() == "again" and first != second
    assert first.endswith(".rank0.log")
    assert all(len(os.path.basename(p).encode()) <= files.MAX_NAME_BYTES for p in (first, second))
