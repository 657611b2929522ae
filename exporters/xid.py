"""The ``err_code`` and ``err_msg`` labels dcgm-exporter puts on ``DCGM_FI_DEV_XID_ERRORS``.

dcgm-exporter labels each XID sample with its code (``err_code``, the decimal value) and the XID's description from
NVIDIA's XID catalogue (``err_msg``), "Unknown Error" for a code its table lacks. gputide keeps the descriptions of
the XIDs it acts on or meets most (no error, the fatal ones of docs/metrics.md and rules/gputide-recording.yaml,
and the usual application and driver faults), worded as dcgm-exporter words them, so a query or dashboard on
``err_msg`` matches either exporter for these; any other code is "Unknown Error" here (dcgm-exporter names more).
"""

from __future__ import annotations

UNKNOWN = "Unknown Error"
MESSAGES: dict[int, str] = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}


def xid_labels(code: float) -> dict[str, str]:
    """``{"err_code": "48", "err_msg": "Double Bit ECC Error"}`` for an XID value (a finite number)."""
    c = int(code)
    return {"err_code": str(c), "err_msg": MESSAGES.get(c, UNKNOWN)}
