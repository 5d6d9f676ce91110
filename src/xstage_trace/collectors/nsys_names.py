"""Version-sensitive Nsight Systems names in one place: tables, event types, GPU-metric names.

Everything that changed between nsys 2022.4 and 2026.x (metric spellings, optional columns,
table presence) is resolved here so that the readers stay version-agnostic.
"""

from __future__ import annotations

import re

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
GPU_INFO_TABLE = "TARGET_INFO_GPU"
CUDA_DEVICE_TABLE = "TARGET_INFO_CUDA_DEVICE"
SESSION_TABLE = "TARGET_INFO_SESSION_START_TIME"
METRICS_TABLE = "GPU_METRICS"
METRIC_NAMES_TABLE = "TARGET_INFO_GPU_METRICS"
EXPORT_META_TABLE = "META_DATA_EXPORT"

# NVTX_EVENTS.eventType codes (stable since 2021; read from ENUM_NSYS_EVENT_TYPE).
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END)
NVTX_DOMAIN_CREATE = 75  # nvtxDomainCreate: the domain's name (text or textId) for its domainId, per process
NVTX_DEFAULT_DOMAIN_ID = 0  # ranges pushed without a domain handle

# Kernel columns every supported export has; the rest are optional.
KERNEL_CORE_COLUMNS = ("start", "end", "deviceId", "streamId", "shortName", "demangledName")
KERNEL_OPTIONAL_COLUMNS = ("correlationId", "globalPid", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")


def pid_of_tid(global_tid):
    """globalPid of a serialized globalTid (the low 24 bits hold the thread id); works on arrays."""
    return global_tid & ~0xFFFFFF

# Normalized GPU-metric name -> pattern over the raw names of all known versions.
# 2022.4 "SM Active", 2023.x "SMs Active", 2025.x "SMs Active [Throughput %]", TU10x
# "Tensor Active / FP16 Active", and so on.
METRIC_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (name, re.compile(pat, re.IGNORECASE))
    for name, pat in (
        ("SM Active", r"^SMs? Active\b(?!.*\[Avg)"),
        ("SM Issue", r"^SM Issue\b"),
        ("Tensor Active", r"^Tensor (Active|Pipe Active)\b"),
        ("GR Active", r"^GR Active\b"),
        ("DRAM Read", r"^DRAM Read (Bandwidth|Throughput)\b"),
        ("DRAM Write", r"^DRAM Write (Bandwidth|Throughput)\b"),
        ("PCIe RX", r"^PCIe (RX|Read)\b"),
        ("PCIe TX", r"^PCIe (TX|Write)\b"),
        ("NVLink RX", r"^NVLink (RX|Read)\b"),
        ("NVLink TX", r"^NVLink (TX|Write)\b"),
        ("Compute Warps in Flight", r"^Compute Warps in Flight \[Throughput"),
        ("GPC Clock", r"^GPC Clock Frequency"),
        ("SYS Clock", r"^SYS Clock Frequency"),
    )
)


def normalize_metric(raw: str) -> str:
    """Map a raw nsys metric name to the version-independent name (the raw name if unknown)."""
    for name, pattern in METRIC_PATTERNS:
        if pattern.search(raw):
            return name
    return raw


def device_of_type_id(type_id):
    """GPU index carried in GPU_METRICS.typeId (low byte, as nsys2prv reads it); works on arrays."""
    return type_id & 0xFF


def parse_version(text: str | None) -> tuple[int, ...]:
    """'2025.3.2.0' -> (2025, 3, 2, 0); unparseable -> ()."""
    if not text:
        return ()
    nums = re.findall(r"\d+", text.split("-")[0])
    return tuple(int(n) for n in nums[:4])
