"""Shared fixtures: a fresh random generator per test (seed printed for replay), a compile-only
context without a cache, and whether this machine has a GPU that libsparsejit can use."""
from __future__ import annotations

import os

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    seed = int(os.environ.get("SJ_TEST_SEED", np.random.SeedSequence().entropy % (1 << 63)))
    print(f"seed {seed} (SJ_TEST_SEED to replay)")
    return np.random.default_rng(seed)


@pytest.fixture
def compile_ctx():
    import sparsejit
    with sparsejit.Context(arch="sm_90a", cache_path="") as ctx:
        yield ctx
