"""Picking the memory rule's two findings (peak near capacity, fragmentation) apart."""

from __future__ import annotations


def near(findings):
    return [f for f in findings if "memory peaks at" in f.title]


def fragmented(findings):
    return [f for f in findings if "reserved but not allocated" in f.title]
