"""Time-ordered UUIDs (RFC 9562 version 7) for documents and chunks.

Python 3.11 has no ``uuid.uuid7``. Ids made at ingest sort by creation time, so
bulk inserts append to the primary-key index rather than scattering across it.
"""

from __future__ import annotations

import os
import time
import uuid


def uuid7() -> uuid.UUID:
    """A version-7 UUID: 48-bit Unix milliseconds, then 74 random bits."""
    milliseconds = time.time_ns() // 1_000_000
    value = (milliseconds & ((1 << 48) - 1)) << 80
    value |= int.from_bytes(os.urandom(10), "big") & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)
