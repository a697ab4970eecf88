"""Hostile inputs: small generators of files that once made opscope hang or blow up memory.

Each returns the path it wrote; sizes are parameters so a fuzz test can scale them up.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.timing import limit


def fifo(path: Path) -> Path:
    """A named pipe where a trace file is expected: open() on it blocks until a writer appears."""
    os.mkfifo(path)
    return path


def many_steps(path: Path, steps: int, repeat: int = 1) -> Path:
    """``steps`` back-to-back ProfilerStep#N annotations, each holding one op (1.5 us each, 2 us apart);
    ``repeat`` > 1 writes the numbers 0..steps-1 that many times over, one run after another."""
    parts = []
    for k in range(steps * repeat):
        i, t = k % steps, 2 * k
        parts.append(f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{i}","pid":1,"tid":1,'
                     f'"ts":{t},"dur":1.5}}')
        parts.append(f'{{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":{t + 0.25},"dur":1}}')
    path.write_text('{"traceEvents":[' + ",".join(parts) + "]}")
    return path


# --- ingest (i14-ingest) ---
# Files that once made the reader hang or grow without bound (the read path).

def _event(i: int, name: str = "aten::add") -> str:
    return f'{{"ph":"X","cat":"cpu_op","name":"{name}","pid":1,"tid":1,"ts":{10 * i},"dur":5}}'


def _events(count: int) -> str:
    return ",".join(_event(i) for i in range(count))


def header_candidates(path: Path, candidates: int, events: int = 3) -> Path:
    """A header whose value holds ``candidates`` nested ``"traceEvents": [`` arrays before the real one."""
    decoys = ",".join('{"traceEvents": [0]}' for _ in range(candidates))
    path.write_text('{"meta": [' + decoys + '], "note": "\\"traceEvents\\": [", "traceEvents": ['
                    + _events(events) + "]}")
    return path


def huge_name(path: Path, name_bytes: int, events: int = 3) -> Path:
    """One event whose name is ``name_bytes`` long, then ``events`` ordinary ones (gzip when ``.gz``)."""
    body = ('{"traceEvents": [' + _event(0, "x" * name_bytes) + "," + _events(events) + "]}").encode()
    _write(path, body)
    return path


def many_name_keys(path: Path, keys: int, events: int = 3) -> Path:
    """``events`` ordinary events, then one damaged object (raw quotes) holding ``keys`` ``"name"`` keys and
    no key that the name repair looks for after a name."""
    damaged = '{"ph":"X",' + '"name":"a"b", ' * keys + '"zz":1}'
    path.write_text('{"traceEvents": [' + _events(events) + "," + damaged + "]}")
    return path


def junk_after_array(path: Path, junk_bytes: int, events: int = 3, form: str = "string") -> Path:
    """``events`` events, then ``junk_bytes`` of junk: ``form`` "string" is a JSON string after the closing
    ``}``, "item" a string item inside the array after the events, "bare" junk after a bare array's ``]``."""
    junk = "j" * junk_bytes
    if form == "string":
        text = '{"traceEvents": [' + _events(events) + ']} "' + junk + '"'
    elif form == "item":
        text = '{"traceEvents": [' + _events(events) + ', "' + junk + '"]}'
    else:
        text = "[" + _events(events) + "] " + junk
    _write(path, text.encode())
    return path


def gzip_bomb(path: Path, events: int) -> Path:
    """A gzip file of ``events`` identical valid events (they compress ~240x). User annotations, not ops:
    identical nested ops take a quadratic path in the model's duplicate-op folding (a separate issue)."""
    import gzip

    one = _event(0).replace("cpu_op", "user_annotation").encode()
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents": [' + one)
        block = b"," + b",".join([one] * 10_000)
        for _ in range(events // 10_000):
            fh.write(block)
        fh.write(b"]}")
    return path


def deep_args(path: Path, depth: int, events: int = 3) -> Path:
    """``events`` events, then one whose args nest ``depth`` levels deep."""
    deep = '{"ph":"X","name":"deep","pid":1,"tid":1,"ts":0,"dur":1,"args":' + '{"a":' * depth + "1" + "}" * depth + "}"
    path.write_text('{"traceEvents": [' + _events(events) + "," + deep + "]}")
    return path


def deep_header(path: Path, depth: int, events: int = 3) -> Path:
    """A header value nested ``depth`` levels deep before the event array."""
    path.write_text('{"meta": ' + "[" * depth + "]" * depth + ', "traceEvents": [' + _events(events) + "]}")
    return path


def _write(path: Path, body: bytes) -> None:
    if path.suffix == ".gz":
        import gzip

        with gzip.open(path, "wb", compresslevel=6) as fh:
            fh.write(body)
    else:
        path.write_bytes(body)


def many_tiny_events(path: Path, events: int) -> Path:
    """``events`` small distinct events: a big trace, not a hostile one (it must stay on the fast path)."""
    path.write_text('{"traceEvents": [' + _events(events) + "]}")
    return path


_RSS_PREFIX = "opscope-test-peak-rss-kb="


def run_cli_peak_rss(*args: str, cache: Path, env: dict[str, str] | None = None):
    """Run ``opscope ARGS`` in a child (60 s on an idle machine, scaled, as ``support.cli.run_cli``) that reports
    its own peak RSS as it exits; returns ``(CompletedProcess without that line, peak RSS in bytes)``."""
    import subprocess
    import sys

    # VmHWM, not getrusage: ru_maxrss survives exec, so a child would report the test process's peak.
    code = ("import atexit, re, runpy, sys\n"
            "hwm = lambda: int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))\n"
            f"atexit.register(lambda: sys.stderr.write('{_RSS_PREFIX}%d\\n' % hwm()))\n"
            "sys.argv = ['opscope', *sys.argv[1:]]\n"
            "runpy.run_module('opscope.cli', run_name='__main__')\n")
    env = {**os.environ, **(env or {}), "OPSCOPE_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                         timeout=limit(60))
    lines = res.stderr.splitlines(keepends=True)
    rss = [int(line[len(_RSS_PREFIX):]) for line in lines if line.startswith(_RSS_PREFIX)]
    assert len(rss) == 1, res.stderr
    res.stderr = "".join(line for line in lines if not line.startswith(_RSS_PREFIX))
    return res, rss[0] * 1024


# --- analyses (i14-analyses) ---

def long_kernel_name(path: Path, length: int, char: str = "<") -> Path:
    """One op launching one kernel whose name is ``length`` characters: ``_Z`` then ``char`` repeated (a mangled-looking
    name no demangler reads, and a template bracket soup for the name shortener)."""
    name = ("_Z" + char * length)[:length]
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 30, "dur": 40,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    import json
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def many_distinct_ops(path: Path, n: int, slower_every: int = 0) -> Path:
    """``n`` ops ``aten::op_<i>``, each recorded once, 1 us long and 2 us apart on one thread, inside one step.
    With ``slower_every`` > 0, every such op takes 2 us instead (a second trace to diff against the first)."""
    parts = [f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":{2 * n + 2}}}']
    for i in range(n):
        dur = 2 if slower_every and i % slower_every == 0 else 1
        parts.append(f'{{"ph":"X","cat":"cpu_op","name":"aten::op_{i}","pid":1,"tid":1,"ts":{2 * i + 0.5},'
                     f'"dur":{dur}}}')
    path.write_text('{"traceEvents":[' + ",".join(parts) + "]}")
    return path
