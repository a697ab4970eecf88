"""Through the command line: a corrupt cache entry never changes a result. Found when the
entry is opened, it is rebuilt with one warning line; found on a side table's first read, it is one error
line, exit 2, and the entry is gone so that the next run rebuilds it."""

from __future__ import annotations

from support.cache import entry_of, flip_in_data_pages
from support.cli import assert_one_line_error, run_cli, run_cli_many


def test_corrupt_events_table_is_rebuilt_with_one_warning(trace_file, cache_dir):
    first, uncached = run_cli_many([("kernels", str(trace_file)), ("kernels", str(trace_file), "--no-cache")],
                                   cache=cache_dir)
    assert first.returncode == 0 and uncached.returncode == 0, (first.stderr, uncached.stderr)
    assert first.stdout == uncached.stdout and "conv_kernel" in uncached.stdout
    flip_in_data_pages(entry_of(trace_file, cache_dir) / "events.arrow")

    rebuilt = run_cli("kernels", str(trace_file), cache=cache_dir)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout == uncached.stdout
    lines = rebuilt.stderr.strip("\n").splitlines()
    assert len(lines) == 1, rebuilt.stderr
    assert lines[0].startswith(f"warning: {trace_file}: cache entry was corrupt (events.arrow"), lines[0]
    assert lines[0].endswith("rebuilt from the trace"), lines[0]

    again = run_cli("kernels", str(trace_file), cache=cache_dir)  # a good entry now: no warning
    assert (again.returncode, again.stdout, again.stderr) == (0, uncached.stdout, "")


def test_corrupt_side_table_read_mid_command_is_one_error_then_rebuilt(trace_file, cache_dir):
    first, uncached = run_cli_many([("steps", str(trace_file)), ("steps", str(trace_file), "--no-cache")],
                                   cache=cache_dir)
    assert first.returncode == 0 and first.stdout == uncached.stdout, first.stderr
    entry = entry_of(trace_file, cache_dir)
    steps_file = entry / "steps.arrow"
    flip_in_data_pages(steps_file)

    broken = run_cli("steps", str(trace_file), cache=cache_dir)
    assert_one_line_error(broken, steps_file, "cache entry was corrupt", "run the command again")
    assert not entry.exists()

    rebuilt = run_cli("steps", str(trace_file), cache=cache_dir)
    assert (rebuilt.returncode, rebuilt.stdout, rebuilt.stderr) == (0, uncached.stdout, "")
    assert (entry / "sums.json").is_file()


def test_an_entry_of_another_trace_put_in_place_is_rebuilt_with_one_warning(tmp_path, trace_file, cache_dir):
    import shutil

    from support.tracefiles import small_gpu_trace, write_trace, x

    other = write_trace(tmp_path / "other.json", small_gpu_trace() + [x("aten::other", 4000, 1)])
    first, theirs, uncached = run_cli_many([("ops", str(trace_file)), ("ops", str(other)),
                                            ("ops", str(trace_file), "--no-cache")], cache=cache_dir)
    assert first.returncode == theirs.returncode == uncached.returncode == 0, (first.stderr, theirs.stderr)
    assert "aten::other" in theirs.stdout and "aten::other" not in uncached.stdout
    entry = entry_of(trace_file, cache_dir)
    shutil.rmtree(entry)
    shutil.copytree(entry_of(other, cache_dir), entry)  # every file matches its checksum

    rebuilt = run_cli("ops", str(trace_file), cache=cache_dir)
    assert (rebuilt.returncode, rebuilt.stdout) == (0, uncached.stdout), rebuilt.stderr
    assert rebuilt.stderr.strip("\n").splitlines() == [
        f"warning: {trace_file}: cache entry did not belong to this trace (it was built from {other.resolve()}); "
        "rebuilt from the trace"]
    again = run_cli("ops", str(trace_file), cache=cache_dir)
    assert (again.returncode, again.stdout, again.stderr) == (0, uncached.stdout, "")
