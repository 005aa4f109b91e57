"""The host formats against numpy references written here from the format's definition (not
from the library): V:N:M magnitude pruning (per block of V rows x M columns the 4 columns of
largest L2 / L1 norm, then per row the 2 of those with largest |a|, ties to the lower column),
exact compression round trips and pattern errors; TwELL counts, entries, spill and overflow, and
its round trip. Fresh random data every run, never zeros alone."""
from __future__ import annotations

import numpy as np
import pytest

import sparsejit
from sparsejit.formats import bf16_bits_to_float, float_to_bf16_bits, from_bits, to_bits


def random_matrix(rng, rows, cols, dtype):
    a = rng.uniform(-2, 2, size=(rows, cols)).astype(np.float32)
    return from_bits(to_bits(a, dtype), dtype).astype(np.float64)  # exactly representable


def prune_reference(a: np.ndarray, v: int, m: int, norm: str) -> np.ndarray:
    rows, cols = a.shape
    out = np.zeros_like(a)
    for r0 in range(0, rows, v):
        for c0 in range(0, cols, m):
            blk = a[r0:r0 + v, c0:c0 + m]
            w = (blk ** 2).sum(axis=0) if norm == "l2" else np.abs(blk).sum(axis=0)
            cols4 = np.sort(np.lexsort((np.arange(w.size), -w))[:4])
            for i in range(blk.shape[0]):
                vals = np.abs(blk[i, cols4])
                keep = cols4[np.lexsort((cols4, -vals))[:2]]
                out[r0 + i, c0 + keep] = blk[i, keep]
    return out


def random_vnm(rng, rows, cols, v, m):
    """A matrix with the V:N:M pattern: per block 4 random columns, per row 2 of them non-zero."""
    a = np.zeros((rows, cols))
    for r0 in range(0, rows, v):
        for c0 in range(0, cols, m):
            width = min(m, cols - c0)
            cand = rng.choice(width, size=min(4, width), replace=False)
            for r in range(r0, min(r0 + v, rows)):
                keep = rng.choice(cand, size=min(2, cand.size), replace=False)
                a[r, c0 + keep] = rng.uniform(0.25, 2.0, size=keep.size) * rng.choice([-1, 1], size=keep.size)
    return a


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("vnm, rows, cols", [("64:2:8", 128, 256), ("16:2:4", 50, 37), ("32:2:16", 70, 100),
                                              ("128:2:8", 130, 64)])
@pytest.mark.parametrize("select", ["l2", "l1"])
def test_vnm_prune_matches_numpy(rng, dtype, vnm, rows, cols, select):
    v, _, m = (int(x) for x in vnm.split(":"))
    a = random_matrix(rng, rows, cols, dtype)
    h = sparsejit.vnm_compress(a.astype(np.float32), vnm, select=select, dtype=dtype)
    assert h.shape == (rows, cols) and h.vnm == vnm and h.dtype == dtype
    got = sparsejit.vnm_decompress(h).astype(np.float64)
    np.testing.assert_array_equal(got, prune_reference(a, v, m, select))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_vnm_exact_round_trip_and_pattern_error(rng, dtype):
    a = random_vnm(rng, 96, 120, 32, 8)
    bits = to_bits(a.astype(np.float32), dtype)
    h = sparsejit.vnm_compress(bits, "32:2:8", dtype=dtype)
    np.testing.assert_array_equal(sparsejit.vnm_decompress(h, bits=True), bits)
    sparsejit.vnm_check(bits, "32:2:8", dtype=dtype)
    bad = a.copy()
    row = int(rng.integers(0, 96))
    bad[row, 0:3] = 1.0  # three non-zeros in one row of a group: 2:4 keeps two
    with pytest.raises(sparsejit.PatternError, match="not V:2:8"):
        sparsejit.vnm_compress(bad.astype(np.float32), "32:2:8", dtype=dtype)
    with pytest.raises(sparsejit.PatternError):
        sparsejit.vnm_check(bad.astype(np.float32), "32:2:8", dtype=dtype)


def test_vnm_argument_errors():
    with pytest.raises(sparsejit.InvalidArgumentError, match="select 'l3'"):
        sparsejit.vnm_compress(np.ones((16, 16), np.float16), select="l3")
    with pytest.raises(sparsejit.InvalidArgumentError, match="2-D"):
        sparsejit.vnm_compress(np.ones(16, np.float16))
    with pytest.raises(sparsejit.InvalidArgumentError, match="dtype"):
        sparsejit.vnm_compress(np.ones((16, 16), np.float32))
    with pytest.raises(sparsejit.InvalidArgumentError, match="M must be in 4..128"):
        sparsejit.vnm_compress(np.ones((16, 16), np.float16), "16:2:2", select="l2")


def test_bf16_rounding_is_nearest_even(rng):
    x = rng.standard_normal(10000).astype(np.float32)
    bits = float_to_bf16_bits(x)
    back = bf16_bits_to_float(bits)
    # the nearest bf16: no other bf16 neighbour is closer
    up = bf16_bits_to_float(bits + np.where(x >= 0, 1, -1).astype(np.uint16))
    down = bf16_bits_to_float(bits - np.where(x >= 0, 1, -1).astype(np.uint16))
    assert np.all(np.abs(back - x) <= np.abs(up - x)) and np.all(np.abs(back - x) <= np.abs(down - x))


def twell_reference(bits: np.ndarray, tile: int, cap: int):
    rows, cols = bits.shape
    n_tiles = -(-cols // tile)
    counts = np.zeros((rows, n_tiles), np.int32)
    entries = {}
    overflow = []
    for r in range(rows):
        for t in range(n_tiles):
            seg = bits[r, t * tile:(t + 1) * tile]
            nz = np.nonzero(seg & 0x7FFF)[0]
            counts[r, t] = nz.size
            entries[r, t] = [(int(c) << 16) | int(seg[c]) for c in nz[:cap]]
            if nz.size > cap:
                overflow.append((r, t))
    return counts, entries, overflow


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("twell, sparsity, rows, cols", [("128:16", 0.9, 40, 1000), ("32:4", 0.7, 17, 100),
                                                         ("8:1", 0.5, 9, 61), ("256:64", 0.99, 5, 2048)])
def test_twell_matches_numpy(rng, dtype, twell, sparsity, rows, cols):
    tile, cap = (int(x) for x in twell.split(":"))
    relu = np.maximum(random_matrix(rng, rows, cols, dtype), 0) * (rng.random((rows, cols)) >= sparsity)
    relu[relu == 0] = 0.0
    if rows > 1:
        relu[0, 1] = -0.0  # -0 counts as a zero
    bits = to_bits(relu.astype(np.float32), dtype)
    t = sparsejit.twell_from_dense(bits, twell, dtype=dtype)
    counts, entries, overflow = twell_reference(bits, tile, cap)
    np.testing.assert_array_equal(t.counts, counts)
    assert t.n_overflow == len(overflow)
    for (r, tt), want in entries.items():
        np.testing.assert_array_equal(t.entries[r, tt, :len(want)], np.array(want, np.uint32))
    want = np.where(bits & 0x7FFF, bits, 0).astype(np.uint16)  # a zero of either sign reads as +0
    for r, tt in overflow:
        np.testing.assert_array_equal(t.spill[r, tt * tile:(tt + 1) * tile], want[r, tt * tile:(tt + 1) * tile])
    dense = sparsejit.twell_to_dense(t, bits=True)
    np.testing.assert_array_equal(dense, want)


def test_twell_to_dense_refuses_inconsistent(rng):
    h = np.maximum(rng.standard_normal((4, 64)), 0).astype(np.float16)
    t = sparsejit.twell_from_dense(h, "32:8")
    t.counts[2, 1] = -1
    with pytest.raises(sparsejit.InvalidArgumentError, match="row 2"):
        sparsejit.twell_to_dense(t)
