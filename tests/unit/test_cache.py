"""The bounded LRU cache of upstream outputs (no database)."""

from __future__ import annotations

import threading

from cyclone_flow.worker.cache import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES, OutputCache


def test_defaults() -> None:
    cache = OutputCache()
    assert (cache.max_entries, cache.max_bytes) == (DEFAULT_MAX_ENTRIES, DEFAULT_MAX_BYTES)
    assert (DEFAULT_MAX_ENTRIES, DEFAULT_MAX_BYTES) == (10_000, 64 * 1024 * 1024)
    assert len(cache) == 0 and cache.size_bytes == 0
    assert cache.get("missing") == (False, None)


def test_hit_returns_value() -> None:
    cache = OutputCache()
    cache.put(("run", "a"), {"x": 1}, 7)
    assert cache.get(("run", "a")) == (True, {"x": 1})
    assert cache.size_bytes == 7


def test_none_value_is_a_hit() -> None:
    cache = OutputCache()
    cache.put("k", None, 4)
    assert cache.get("k") == (True, None)


def test_bounded_by_entries_evicts_oldest() -> None:
    cache = OutputCache(max_entries=3, max_bytes=1000)
    for i in range(5):
        cache.put(i, f"v{i}", 1)
    assert len(cache) == 3
    assert [cache.get(i)[0] for i in range(5)] == [False, False, True, True, True]
    assert cache.size_bytes == 3


def test_bounded_by_bytes_evicts_oldest() -> None:
    cache = OutputCache(max_entries=100, max_bytes=10)
    cache.put("a", "A", 4)
    cache.put("b", "B", 4)
    cache.put("c", "C", 4)  # 12 bytes > 10: "a" goes
    assert cache.get("a") == (False, None)
    assert cache.get("b") == (True, "B")
    assert cache.get("c") == (True, "C")
    assert cache.size_bytes == 8
    cache.put("d", "D", 10)  # needs the whole budget: everything else goes
    assert len(cache) == 1 and cache.size_bytes == 10
    assert cache.get("d") == (True, "D")


def test_oversized_value_is_not_cached_and_evicts_nothing() -> None:
    cache = OutputCache(max_entries=10, max_bytes=10)
    cache.put("small", 1, 5)
    cache.put("big", 2, 11)
    assert cache.get("big") == (False, None)
    assert cache.get("small") == (True, 1)
    assert cache.size_bytes == 5 and len(cache) == 1


def test_value_exactly_at_budget_is_cached() -> None:
    cache = OutputCache(max_entries=10, max_bytes=10)
    cache.put("k", "v", 10)
    assert cache.get("k") == (True, "v")


def test_get_refreshes_recency() -> None:
    cache = OutputCache(max_entries=2, max_bytes=1000)
    cache.put("a", 1, 1)
    cache.put("b", 2, 1)
    assert cache.get("a")[0]  # "a" becomes most recent
    cache.put("c", 3, 1)  # evicts "b", the least recent
    assert cache.get("b") == (False, None)
    assert cache.get("a") == (True, 1)
    assert cache.get("c") == (True, 3)


def test_put_existing_key_refreshes_recency_and_size() -> None:
    cache = OutputCache(max_entries=2, max_bytes=100)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    cache.put("a", 11, 30)  # replaces, becomes most recent, size counted once
    assert cache.size_bytes == 40 and len(cache) == 2
    cache.put("c", 3, 10)  # evicts "b"
    assert cache.get("b") == (False, None)
    assert cache.get("a") == (True, 11)
    assert cache.size_bytes == 40


def test_bytes_accounting_matches_contents_under_threads() -> None:
    cache = OutputCache(max_entries=50, max_bytes=400)

    def writer(offset: int) -> None:
        for i in range(500):
            cache.put((offset, i % 80), i, 1 + i % 13)
            cache.get((offset, (i * 7) % 80))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= 50
    assert 0 < cache.size_bytes <= 400
    assert cache.size_bytes == sum(size for _, size in cache._items.values())
