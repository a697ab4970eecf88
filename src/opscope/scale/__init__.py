"""The executor seam: runs per-rank tasks on a local process pool or a Dask cluster."""
