#!/usr/bin/env python3
# slot_model.py: how many mma slots ALGO=2 (templates/lib/twell_pairs_mma.lua) spends per group of
# 8 tokens and 512-unit tile, one per (token, unit) pair as today, against one per unit of the
# group's union (a slot's up mma already multiplies its row with all 8 tokens of the group), each
# padded to a multiple of 16 as the kernel pads. Inputs as `sparsejit bench --sparsity S --skew A`
# makes them: unit j fires independently per token at rate_j ~ rank^-A, capped at 0.5, mean 1 - S
# (tuner/harness.c, harness_unit_rates). Needs numpy. Prints one row per (sparsity, skew).
import numpy as np

rng = np.random.default_rng(1)
F, UT, G, NG = 11008, 512, 8, 512  # d_ff, unit tile, tokens per group, groups sampled


def rates(density, skew):
    if skew == 0:
        return np.full(F, density)
    w = rng.permutation(np.arange(1, F + 1)).astype(float) ** -skew
    lo, hi = 0.0, 1.0
    while np.minimum(hi * w, 0.5).mean() < density:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(mid * w, 0.5).mean() < density else (lo, mid)
    return np.minimum(hi * w, 0.5)


def pad(n):
    return (n + 15) // 16 * 16


print("| sparsity | skew A | pairs | union | padded slots, pairs | padded slots, union | union / pairs |")
print("|---|---|---|---|---|---|---|")
for s in (0.90, 0.95, 0.99, 0.999):
    for a in (0, 1, 2):
        act = rng.random((NG, G, F)) < rates(1 - s, a)  # groups x tokens x units
        nt = (F + UT - 1) // UT
        tot = np.zeros(4)
        for t in range(nt):
            blk = act[:, :, t * UT:(t + 1) * UT]
            p, u = blk.sum(axis=(1, 2)), blk.any(axis=1).sum(axis=1)
            tot += [p.sum(), u.sum(), pad(p).sum(), pad(u).sum()]
        tot /= NG * nt
        print("| %.1f%% | %d | %.1f | %.1f | %.1f | %.1f | %.2f |" % (100 * s, a, *tot, tot[3] / tot[2]))
