"""Capture: run PyTorch code under the profiler. Needs the ``torch`` extra; imported lazily."""
