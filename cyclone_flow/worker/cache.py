"""The per-client LRU cache of upstream outputs (Engine Design: Output Resolution).

Keys are ``(run_id, node)``; values are decoded JSON with their encoded size. The cache
holds at most ``max_entries`` entries (10,000) and ``max_bytes`` of JSON (64 MiB) for the
life of the client, and never holds one value larger than the byte budget. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

DEFAULT_MAX_ENTRIES = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class OutputCache:
    """A bounded LRU map ``key -> (value, size_bytes)``."""

    def __init__(
        self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[bool, Any]:
        """``(True, value)`` on a hit (which becomes most recent), ``(False, None)`` on a miss."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return False, None
            self._items.move_to_end(key)
            return True, item[0]

    def put(self, key: Hashable, value: Any, size_bytes: int) -> None:
        """Insert or refresh ``key``; evict least recent entries over either bound. A value
        larger than ``max_bytes`` is not cached."""
        if size_bytes > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size_bytes)
            self._bytes += size_bytes
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size_bytes(self) -> int:
        """Bytes of JSON held now."""
        return self._bytes
