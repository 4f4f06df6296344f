"""The stand-in twins' sample (tests/conftest.py): fixed first/last parameter sets,
a seeded quarter of the rest, the same for one seed and another for the next."""
from __future__ import annotations

import math

from conftest import STAND_IN_FRACTION, stand_in_sample, stand_in_seed

GROUPS = {("test_a", "test_many"): (True, 40), ("test_a", "test_two"): (True, 2),
          ("test_b", "test_mirror"): (False, 9), ("test_b", "test_one"): (True, 1)}


def test_fixed_positions_and_a_seeded_fraction_of_the_rest():
    kept = stand_in_sample(GROUPS, seed=7)
    assert {0, 39} <= kept[("test_a", "test_many")] and len(kept[("test_a", "test_many")]) == 2 + math.ceil(
        STAND_IN_FRACTION * 38)
    assert kept[("test_a", "test_two")] == {0, 1} and kept[("test_b", "test_one")] == {0}
    assert 0 in kept[("test_b", "test_mirror")] and len(kept[("test_b", "test_mirror")]) == 1 + math.ceil(
        STAND_IN_FRACTION * 8)
    assert all(max(k) < n for k, (_, n) in zip(kept.values(), GROUPS.values()))


def test_one_seed_one_sample_and_the_samples_rotate():
    assert stand_in_sample(GROUPS, seed=7) == stand_in_sample(dict(reversed(GROUPS.items())), seed=7)
    many = [frozenset(stand_in_sample(GROUPS, seed=s)[("test_a", "test_many")]) for s in range(40)]
    assert len(set(many)) == 40
    covered = set().union(*many)
    assert covered == set(range(40))  # forty commits run every parameter set


def test_the_seed_is_the_commit_unless_given(monkeypatch):
    monkeypatch.setenv("DMLQ_STAND_IN_SEED", "1234")
    assert stand_in_seed() == 1234
    monkeypatch.delenv("DMLQ_STAND_IN_SEED")
    assert stand_in_seed() == stand_in_seed()
