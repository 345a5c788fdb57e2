"""Holding a chatty library's log back for the length of one step."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

__all__ = ["held_back"]


@contextlib.contextmanager
def held_back(logger_name: str, level: int) -> Iterator[None]:
    """Only records at ``level`` or above from ``logger_name`` while inside; its own level after."""
    logger = logging.getLogger(logger_name)
    previous = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(previous)
