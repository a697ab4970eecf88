"""outfile.write_file: an output never replaces a file unless asked, and a failed write leaves nothing behind."""

from __future__ import annotations

import os

import pytest

from opscope.errors import UsageError
from opscope.outfile import write_file


def test_writes_and_reports_size(tmp_path):
    target = tmp_path / "r.html"
    assert write_file(target, lambda s: s.write(b"abc")) == 3
    assert target.read_bytes() == b"abc"
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_existing_file_kept_without_force(tmp_path):
    target = tmp_path / "r.html"
    target.write_bytes(b"old")
    with pytest.raises(UsageError, match="already exists; pass --force"):
        write_file(target, lambda s: s.write(b"new"))
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["r.html"]


def test_force_replaces(tmp_path):
    target = tmp_path / "r.html"
    target.write_bytes(b"old")
    write_file(target, lambda s: s.write(b"new"), force=True)
    assert target.read_bytes() == b"new"


def test_failed_write_leaves_target_and_no_temporary(tmp_path):
    target = tmp_path / "r.html"
    target.write_bytes(b"old")

    def fail(stream):
        stream.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(UsageError, match="No space left"):
        write_file(target, fail, force=True)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["r.html"]


def test_symlink_and_directory_refused(tmp_path):
    (tmp_path / "real").write_bytes(b"keep")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UsageError, match="not a regular file"):
        write_file(tmp_path / "link", lambda s: s.write(b"x"), force=True)
    with pytest.raises(UsageError, match="is a directory"):
        write_file(tmp_path, lambda s: s.write(b"x"))
    with pytest.raises(UsageError, match="does not exist"):
        write_file(tmp_path / "missing" / "r.html", lambda s: s.write(b"x"))
    assert (tmp_path / "real").read_bytes() == b"keep"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(UsageError, match="cannot write there"):
            write_file(ro / "r.html", lambda s: s.write(b"x"))
    finally:
        ro.chmod(0o755)
