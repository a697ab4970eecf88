"""rocprof-compute's (omniperf's) descriptions of a workload, which are not traces: ``sysinfo.csv`` (the machine
and GPU) and ``roofline.csv`` (measured peak bandwidths and FLOPs). Sniffed so that opening one says what it is
and which file of the same directory to open instead, rather than "not a trace format"."""

from __future__ import annotations

from pathlib import Path

from opscope.model.trace import Trace

FORMAT = "rocprof_compute_info"
_SYSINFO = b"workload_name,command,ip_blocks,"
_ROOFLINE = b"device,HBMBw,"


class RocprofComputeInfoReader:
    """Recognises rocprof-compute's sysinfo.csv and roofline.csv, and refuses them with a clear message."""

    name = FORMAT

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        return text.startswith((_SYSINFO, _ROOFLINE))

    def read(self, path: Path, *, progress=None, keep_args: bool = True) -> Trace:
        from opscope.errors import TraceError
        from opscope.ingest.registry import read_head

        what = ("rocprof-compute's system description (sysinfo.csv)" if read_head(path).lstrip(b"\xef\xbb\xbf")
                .startswith(_SYSINFO) else "rocprof-compute's roofline peaks (roofline.csv)")
        raise TraceError(path, f"is {what}, not a trace",
                         "open pmc_perf.csv or timestamps.csv from the same workload directory")


READER = RocprofComputeInfoReader()
