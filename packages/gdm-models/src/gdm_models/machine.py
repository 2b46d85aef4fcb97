"""What this machine has, for the bounds that refuse work before it starts."""

from __future__ import annotations

import os

__all__ = ["memory_bytes"]


def memory_bytes() -> int:
    """This machine's physical memory in bytes (16 GiB where the OS does not say): the bound
    that model sizes and imagination outputs are refused against (issue 38, issue 47)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 16 * 2**30
