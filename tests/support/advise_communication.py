"""Picking the straggler findings out of the communication rule's findings."""

from __future__ import annotations


def stragglers(findings):
    return [f for f in findings if f.title.startswith("Straggler")]
