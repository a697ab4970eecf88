"""Readers of the rocprof family: rocprof v1/v2 files, rocprofv3 outputs, rocprof-compute (omniperf) counters."""
