"""The KV pool and its prefix cache: the physics behind a soak's hit rate.

A pool of ``num_blocks`` blocks. A full block is identified by a chain hash (its parent's
hash and its own token ids), so a block is reused only when the *whole* prefix before it
matches. Blocks held by running sequences are pinned; when a sequence finishes its hashed
blocks stay cached but become evictable, least recently used first (tail blocks of a
conversation go before its head, as in vLLM's free queue). Everything is counted in
blocks; this module knows nothing about requests or time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

ROOT_HASH = 0x5EED


def chain_hashes(
    ids: Sequence[int], block_size: int, start: int = 0, parent: int = ROOT_HASH
) -> list[int]:
    """Chain hashes of the full blocks of ``ids`` from block index ``start``."""
    out: list[int] = []
    h = parent
    n_full = len(ids) // block_size
    for b in range(start, n_full):
        h = hash((h, tuple(ids[b * block_size : (b + 1) * block_size])))
        out.append(h)
    return out


class KVPool:
    """Block accounting with a hash-keyed prefix cache and LRU eviction."""

    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.free = num_blocks  # blocks holding nothing useful
        self._refs: dict[int, int] = {}  # hash -> number of sequences holding it
        self._lru: OrderedDict[int, None] = OrderedDict()  # hashed blocks nobody holds
        self.evictions = 0

    # --- what the scheduler asks -------------------------------------------------------
    @property
    def used(self) -> int:
        """Blocks pinned by running sequences (what vLLM's kv_cache_usage_perc counts)."""
        return self.num_blocks - self.free - len(self._lru)

    @property
    def cached_blocks(self) -> int:
        return len(self._refs)

    @property
    def available(self) -> int:
        """Blocks a new allocation could get (free plus evictable)."""
        return self.free + len(self._lru)

    def lookup(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` are in the cache."""
        if not self.caching:
            return 0
        n = 0
        refs = self._refs
        for h in hashes:
            if h not in refs:
                break
            n += 1
        return n

    def evictable_among(self, hashes: Sequence[int]) -> int:
        """How many of these cached blocks are evictable (pinning them shrinks ``available``)."""
        refs = self._refs
        return sum(1 for h in hashes if refs.get(h) == 0)

    # --- changes -----------------------------------------------------------------------
    def acquire(self, hashes: Sequence[int]) -> None:
        """Pin cached blocks (all must be present: call ``lookup`` first)."""
        for h in hashes:
            r = self._refs[h]
            if r == 0:
                del self._lru[h]
            self._refs[h] = r + 1

    def allocate(self, n: int) -> bool:
        """Take ``n`` empty blocks, evicting least recently used cached ones; all or none."""
        if n <= 0:
            return True
        if self.free + len(self._lru) < n:
            return False
        need = n - self.free
        if need > 0:
            for _ in range(need):
                h, _none = self._lru.popitem(last=False)
                del self._refs[h]
                self.evictions += 1
            self.free += need
        self.free -= n
        return True

    def commit(self, h: int) -> bool:
        """A private block of a running sequence just became full with hash ``h``.

        Returns True if the block now stands in the cache under ``h``. If another sequence
        already cached the same block, ours is dropped and theirs is pinned instead.
        """
        if not self.caching:
            return False
        r = self._refs.get(h)
        if r is None:
            self._refs[h] = 1
            return True
        if r == 0:
            del self._lru[h]
        self._refs[h] = r + 1
        self.free += 1
        return True

    def release(self, hashes: Sequence[int], private: int) -> None:
        """A sequence lets go of its blocks: hashed ones stay cached, tail first to evict."""
        self.free += private
        for h in reversed(hashes):
            r = self._refs[h] - 1
            self._refs[h] = r
            if r == 0:
                self._lru[h] = None

    def reset(self) -> None:
        """Drop everything (a restart)."""
        self.free = self.num_blocks
        self._refs.clear()
        self._lru.clear()
