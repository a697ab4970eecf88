"""Kineto's name of a pageable host-to-device copy, for the memcpy rule's tests."""

from __future__ import annotations

PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
