"""The KV pool: chain hashes, longest-prefix lookup, pinning, LRU eviction tail first."""

from __future__ import annotations

from stress.sim.kv import KVPool, chain_hashes


def test_chain_hash_depends_on_the_whole_prefix() -> None:
    a = chain_hashes(list(range(64)), 16)
    b = chain_hashes([999, *range(1, 64)], 16)
    assert len(a) == 4
    assert all(x != y for x, y in zip(a, b, strict=True))  # one token differs -> all differ
    assert chain_hashes(list(range(70)), 16) == a  # partial blocks are not hashed


def test_lookup_acquire_release_and_lru_tail_first() -> None:
    pool = KVPool(6)
    seq = chain_hashes(list(range(64)), 16)  # 4 blocks
    assert pool.allocate(4)
    for h in seq:
        assert pool.commit(h)
    assert pool.used == 4 and pool.lookup(seq) == 4
    pool.release(seq, 0)
    assert pool.used == 0 and pool.available == 6 and pool.cached_blocks == 4
    # Need 3 blocks: 2 free + 1 evicted, and the evicted one is the conversation's tail.
    assert pool.allocate(3)
    assert pool.lookup(seq) == 3
    assert pool.evictions == 1


def test_pinned_blocks_are_never_evicted() -> None:
    pool = KVPool(4)
    seq = chain_hashes(list(range(32)), 16)
    pool.allocate(2)
    for h in seq:
        pool.commit(h)
    assert not pool.allocate(3)  # only 2 free, the 2 cached are pinned
    assert pool.allocate(2)
    assert pool.lookup(seq) == 2


def test_duplicate_commit_shares_the_cached_block() -> None:
    pool = KVPool(4)
    (h,) = chain_hashes(list(range(16)), 16)
    pool.allocate(1)
    pool.commit(h)
    pool.allocate(1)
    pool.commit(h)  # a second sequence computed the same block: ours is freed
    assert pool.free == 3 and pool.used == 1
    pool.release([h], 0)
    pool.release([h], 0)
    assert pool.used == 0 and pool.cached_blocks == 1


def test_caching_off_never_hits() -> None:
    pool = KVPool(4, caching=False)
    (h,) = chain_hashes(list(range(16)), 16)
    pool.allocate(1)
    assert not pool.commit(h)
    assert pool.lookup([h]) == 0
