"""The peaks of a device, for a roofline: dense FLOP/s per data type and memory bandwidth.

A trace names its devices (Kineto's ``deviceProperties``, an nsys export's GPU table, rocprof's agents, XProf's
device planes: all readers put them in ``metadata["device_properties"]``). :func:`trace_peaks` looks them up in the
table of published peaks (``data/peaks.json``: every figure with its datasheet), or reads a peaks file given with
``--peaks FILE`` (what ``opscope peaks`` writes after measuring a machine). Nothing here measures or reaches the
network; a peaks file is untrusted input, checked as a trace is.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from opscope.errors import TraceError

#: the data types a peak is given for, in this order (int8 in TOPS, the others in TFLOP/s)
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
#: the largest peaks file read (a measured one is under 1 KiB)
MAX_FILE_BYTES = 64 * 1024
#: bounds on a figure in a peaks file: 1 EFLOP/s, 1 PB/s (no device is near; a larger number is a unit mistake)
MAX_TFLOPS = 1e6
MAX_GBPS = 1e6
_MAX_TEXT = 1000
#: what ``opscope peaks`` writes as ``format``; a file without it is read too
FILE_FORMAT = "opscope-peaks/1"


@dataclass(frozen=True)
class Peaks:
    """What a device can do at most: the roofline's ceilings."""

    device: str                 # the table's name for it, or what was measured
    tflops: dict[str, float]    # dtype key -> dense peak TFLOP/s (TOPS for int8); keys absent where none
    gbps: float                 # memory bandwidth, GB/s
    source: str                 # datasheet (title, URL) or "measured on this machine by opscope peaks (date, how)"

    def to_json(self) -> dict[str, Any]:
        """The document :func:`read_peaks_file` reads."""
        return {"format": FILE_FORMAT, "device": self.device,
                "tflops": {k: self.tflops[k] for k in DTYPES if k in self.tflops}, "gbps": self.gbps,
                "source": self.source}


@dataclass(frozen=True)
class _Entry:
    peaks: Peaks
    patterns: tuple[re.Pattern[str], ...]
    units: int | None
    gfx: str | None
    compute: tuple[int, int] | None
    prop_units: int | None
    memory_gib: tuple[float, float] | None
    note: str | None


@functools.cache
def _table() -> tuple[_Entry, ...]:
    doc = json.loads(resources.files("opscope.analyses").joinpath("data/peaks.json").read_text())
    out = []
    for d in doc["devices"]:
        props = d.get("properties") or {}
        out.append(_Entry(
            peaks=Peaks(d["name"], {k: float(v) for k, v in d["tflops"].items() if v is not None},
                        float(d["gbps"]), d["source"]),
            patterns=tuple(re.compile(p, re.IGNORECASE) for p in d["match"]),
            units=d.get("units"), gfx=props.get("gfx"),
            compute=(int(props["compute"][0]), int(props["compute"][1])) if "compute" in props else None,
            prop_units=props.get("units"),
            memory_gib=((float(props["memory_gib"][0]), float(props["memory_gib"][1])) if "memory_gib" in props
                        else None),
            note=d.get("note")))
    return tuple(out)


def known_devices() -> list[Peaks]:
    """Every device of the table, in its order."""
    return [e.peaks for e in _table()]


def _entry_for(device_name: str) -> _Entry | None:
    name = device_name.strip()[:256]
    if not name:
        return None
    return next((e for e in _table() if any(p.search(name) for p in e.patterns)), None)


def peaks_for(device_name: str) -> Peaks | None:
    """The published peaks of the device a trace names so (``NVIDIA H100 80GB HBM3``, ``AMD Instinct MI300X``,
    ``gfx908``); None when the table does not know it."""
    if not isinstance(device_name, str):
        return None
    entry = _entry_for(device_name)
    return entry.peaks if entry else None


def _properties(trace: Any) -> list[dict[str, Any]]:
    props = getattr(trace, "metadata", {}).get("device_properties") or []
    return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []


def trace_devices(trace: Any) -> list[str]:
    """The device names the trace records, each once, in the order of its devices."""
    names: list[str] = []
    for p in _properties(trace):
        name = p.get("name")
        if isinstance(name, str) and name.strip() and name.strip() not in names:
            names.append(name.strip())
    return names


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _by_properties(p: dict[str, Any]) -> _Entry | None:
    """The one table entry the device's properties fit (gfx target or compute capability, compute units, memory),
    for a device whose name says nothing (ROCm's Kineto writes 'AMD Radeon Graphics'); None when none or several
    fit."""
    gfx = p.get("gfx") if isinstance(p.get("gfx"), str) else None
    gfx = gfx.split(":")[0].strip() if gfx else None
    major, minor = _int(p.get("computeMajor")), _int(p.get("computeMinor"))
    units = _int(p.get("numSms")) or _int(p.get("multiProcessorCount"))
    memory = _int(p.get("totalGlobalMem"))
    if units is None:
        return None
    fits = []
    for e in _table():
        if e.prop_units is None or e.prop_units != units:
            continue
        if gfx is not None:
            if e.gfx != gfx:
                continue
        elif e.compute is None or (major, minor) != e.compute or not _wave64(p):
            continue  # without a gfx name only AMD's (64-wide waves) compute capabilities are told apart
        if e.memory_gib is not None and (memory is None or not e.memory_gib[0] <= memory / 2**30 < e.memory_gib[1]):
            continue
        fits.append(e)
    return fits[0] if len(fits) == 1 else None


def _wave64(p: dict[str, Any]) -> bool:
    """An AMD Instinct device by its properties: 64-wide waves, or (where the warp size is not given, as in an
    XSpace) AMD named as the vendor."""
    warp = _int(p.get("warpSize"))
    vendor = p.get("vendor")
    return warp == 64 or (warp is None and isinstance(vendor, str) and vendor.strip().upper() == "AMD")


def _describe(p: dict[str, Any]) -> str:
    bits = []
    if isinstance(p.get("gfx"), str):
        bits.append(p["gfx"])
    major, minor = _int(p.get("computeMajor")), _int(p.get("computeMinor"))
    if major is not None and minor is not None:
        bits.append(f"compute {major}.{minor}")
    units = _int(p.get("numSms")) or _int(p.get("multiProcessorCount"))
    if units is not None:
        bits.append(f"{units} SMs/CUs")
    memory = _int(p.get("totalGlobalMem"))
    if memory:
        bits.append(f"{memory / 2**30:.0f} GiB")
    return ", ".join(bits)


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:200])


def trace_peaks(trace: Any, override: Path | None = None) -> tuple[Peaks | None, str]:
    """The peaks to use for the trace's device and one line saying where they come from: the file given
    (``--peaks FILE``, read with :func:`read_peaks_file`), else the table entry of the device the trace names (by
    its name, else by its properties), else None and what to do. A trace with devices of several kinds gets the
    first device's peaks, and the line says so."""
    if override is not None:
        peaks = read_peaks_file(override)
        return peaks, f"peaks from {override}: {_printable(peaks.device)} ({_printable(peaks.source)})"
    props = _properties(trace)
    names = trace_devices(trace)
    found: list[tuple[str, _Entry, str]] = []  # (what the trace says, entry, how)
    for p in props:
        raw = p.get("name")
        name = raw.strip() if isinstance(raw, str) else ""
        entry = _entry_for(name) if name else None
        how = "by name"
        if entry is None:
            entry, how = _by_properties(p), f"by its properties ({_describe(p)})"
        if entry is not None and all(f[1] is not entry for f in found):
            found.append((name or "unnamed device", entry, how))
    if not found:
        if not names:
            return None, "the trace names no device; give --peaks FILE (opscope peaks writes one)"
        shown = ", ".join(repr(_printable(n)) for n in names[:4])
        return None, f"device not recognised: {shown}; give --peaks FILE (opscope peaks writes one)"
    name, entry, how = found[0]
    line = f"recognised {_printable(name)!r} as {entry.peaks.device}"
    if how != "by name":
        line += f" {how}"
    if entry.note:
        line += f" ({entry.note})"
    units = [u for p in props if (u := _int(p.get("numSms")) or _int(p.get("multiProcessorCount"))) is not None]
    if how == "by name" and entry.units is not None and units and entry.units not in units:
        line += f"; its {units[0]} SMs/CUs differ from the {entry.units} of that part: check, or give --peaks FILE"
    if len(found) > 1:
        others = ", ".join(f[1].peaks.device for f in found[1:])
        line += f"; the trace also has {others} devices (their peaks differ: the first is used)"
    line += f"; published peaks: {entry.peaks.source}"
    return entry.peaks, line


def _bad(path: Path, problem: str) -> TraceError:
    return TraceError(path, problem, "opscope peaks writes a peaks file")


def _figure(path: Path, what: str, value: Any, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(path, f"{what} is not a number")
    number = float(value)
    if not math.isfinite(number) or number <= 0 or number > most:
        raise _bad(path, f"{what} is {value!r}: a peaks file needs a positive number up to {most:g}")
    return number


def _text(path: Path, what: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(path, f"{what} is not a text")
    if len(value) > _MAX_TEXT:
        raise _bad(path, f"{what} is longer than {_MAX_TEXT} characters")
    return value.strip()


def read_peaks_file(path: Path) -> Peaks:
    """A peaks file (JSON: ``device``, ``tflops`` per data type, ``gbps``, ``source``, as ``opscope peaks
    --output`` writes it), checked: at most 64 KiB, the types, positive finite figures in range, known data types.
    TraceError (one line naming the file) for anything else."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a peaks file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise _bad(path, f"is larger than {MAX_FILE_BYTES // 1024} KiB: not a peaks file")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad(path, "is not JSON") from None
    if not isinstance(doc, dict):
        raise _bad(path, "is not a JSON object")
    fmt = doc.get("format", FILE_FORMAT)
    if fmt != FILE_FORMAT:
        raise _bad(path, f"has format {_printable(str(fmt))!r}, not {FILE_FORMAT}")
    device = _text(path, "device", doc.get("device"))
    source = _text(path, "source", doc.get("source", "peaks file"))
    tflops_in = doc.get("tflops")
    if not isinstance(tflops_in, dict) or not tflops_in:
        raise _bad(path, "has no tflops object (TFLOP/s per data type)")
    tflops: dict[str, float] = {}
    for key, value in tflops_in.items():
        if key not in DTYPES:
            raise _bad(path, f"tflops has {_printable(str(key))!r}: the data types are {', '.join(DTYPES)}")
        if value is not None:
            tflops[key] = _figure(path, f"tflops.{key}", value, MAX_TFLOPS)
    if not tflops:
        raise _bad(path, "gives no figure in tflops")
    gbps = _figure(path, "gbps", doc.get("gbps"), MAX_GBPS)
    return Peaks(device, {k: tflops[k] for k in DTYPES if k in tflops}, gbps, source)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")
