"""Published peak bandwidth of a GPU's intra-node link (NVLink, AMD Infinity Fabric/xGMI), per GPU, one direction.

The vendors publish the total of both directions over all of a GPU's links; the bus bandwidth of nccl-tests is
compared with one direction, so each number below is half the published total. A group that spans nodes is limited
by the network, not by these links. PCIe cards and boards whose link depends on a bridge or a topology get None.
"""

from __future__ import annotations

import re

# (pattern on the device name, case-insensitive; GB/s one direction or None), first match wins.
_RULES: tuple[tuple[str, float | None], ...] = (
    (r"pcie", None),                      # PCIe cards: NVLink only through an optional bridge
    (r"\bH[12]00\b.*\bNVL\b", None),      # H100 NVL / H200 NVL: bridged pairs or quads, not a full switch
    # NVLink 5, 18 links, 1.8 TB/s per GPU (nvidia.com/en-us/data-center/dgx-b200/, .../gb200-nvl72/, HGX B300)
    (r"\bGB[23]00\b", 900.0),
    (r"\bB[23]00\b", 900.0),
    # NVLink 4, 18 links, 900 GB/s per GPU (H100 SXM5 datasheet; H200 SXM datasheet; GH200 datasheet)
    (r"\bGH200\b", 450.0),
    (r"\bH200\b", 450.0),
    (r"\bH100\b", 450.0),                 # "NVIDIA H100 80GB HBM3" is the SXM5 part (PCIe/NVL excluded above)
    (r"\bH800\b", 200.0),                 # H800 SXM5: NVLink 400 GB/s (NVIDIA H800 product brief)
    # NVLink 3, 12 links, 600 GB/s per GPU (A100 datasheet, SXM4); A800 SXM4: 400 GB/s
    (r"\bA800\b.*SXM", 200.0),
    (r"\bA100\b.*SXM", 300.0),
    # NVLink 2, 6 links, 300 GB/s per GPU (Tesla V100 datasheet, SXM2; DGX-2's SXM3 the same)
    (r"\bV100\b.*SXM", 150.0),
    # 7 Infinity Fabric links x 128 GB/s = 896 GB/s peak aggregate (AMD Instinct MI300X / MI325X data sheets)
    (r"\bMI300X\b", 448.0),
    (r"\bMI325X\b", 448.0),
    # MI250X: the published 800 GB/s is per package (two GCDs, each a device to the profiler) and includes the
    # links between its own GCDs; a per-device peak depends on the platform's topology -> unknown
)
_COMPILED = tuple((re.compile(p, re.IGNORECASE), v) for p, v in _RULES)


def link_peak_gbps(device_name: str | None) -> float | None:
    """Peak unidirectional intra-node link bandwidth (GB/s = 1e9 B/s) of a GPU named as Kineto's
    ``deviceProperties`` name it (``NVIDIA H100 80GB HBM3``, ``NVIDIA B200``, ``AMD Instinct MI300X``); None
    when unknown."""
    if not isinstance(device_name, str) or not device_name:
        return None
    name = device_name[:256]
    for pattern, peak in _COMPILED:
        if pattern.search(name):
            return peak
    return None
