"""The linearizability checker (linearizability.py) against histories whose answer is known: hand-made
ones for each rule of the model, and random small ones against a search of every order; then the
histories of the cluster simulation (tests/sim/cluster_sim.cc --history) through it. No server."""

from __future__ import annotations

import itertools
import random
import subprocess

import pytest
from conftest import REPO_ROOT, binary_path
from linearizability import (
    Operation,
    Recorder,
    check,
    check_all,
    load,
    load_keys,
    save,
    step,
)

SIM_SEEDS = 100
ARTIFACTS = REPO_ROOT / "build" / "test-artifacts" / "linearizability"

INF = None


def op(kind, start, end, value=None, outcome="ok", expected=None, client="c"):
    return Operation(client=client, kind=kind, invoked=start, returned=end, value=value,
                     expected=expected, outcome=None if kind == "get" or end is None else outcome)


def test_sequential_histories():
    ok = [op("put", 0, 1, 1), op("get", 2, 3, 1), op("delete", 4, 5), op("get", 6, 7, None)]
    assert check(ok).linearizable
    stale = [op("put", 0, 1, 1), op("put", 2, 3, 2), op("get", 4, 5, 1)]
    verdict = check(stale)
    assert verdict.linearizable is False
    assert verdict.stuck_at is stale[2] and "came between" in verdict.explain()
    # The same found by the search: the newer write overlaps the read.
    overlapping = [op("put", 0, 1, 1), op("put", 2, 6, 2), op("get", 3, 4, 2), op("get", 5, 7, 1)]
    verdict = check(overlapping)
    assert verdict.linearizable is False and verdict.stuck_at is overlapping[3]
    assert verdict.stuck_state == 2
    assert check([op("put", 0, 1, 1), op("delete", 2, 3), op("get", 4, 5, 1)]).linearizable is False


def test_a_read_never_goes_back_once_a_concurrent_write_is_seen():
    # The write overlaps both reads: either may see it, but not the first alone.
    assert check([op("put", 0, 10, 1), op("get", 1, 2, None), op("get", 3, 4, 1)]).linearizable
    assert check([op("put", 0, 10, 1), op("get", 1, 2, 1), op("get", 3, 4, None)]).linearizable is False


def test_an_unknown_outcome_may_take_effect_late_or_never():
    lost = op("put", 0, INF, 1)
    assert check([lost, op("get", 5, 6, None)]).linearizable
    assert check([lost, op("get", 5, 6, None), op("get", 7, 8, 1)]).linearizable
    assert check([lost, op("get", 5, 6, 1), op("get", 7, 8, None)]).linearizable is False
    # It cannot take effect before it was sent.
    assert check([op("get", 0, 1, 1), op("put", 2, INF, 1)]).linearizable is False
    # Failed reads say nothing.
    assert check([op("put", 0, 1, 1), op("get", 2, INF, 7)]).linearizable


def test_conditional_creates():
    both = [op("create", 0, 5, 1, client="a"), op("create", 1, 6, 2, client="b")]
    assert check(both).linearizable is False
    one = [op("create", 0, 5, 1, client="a"), op("create", 1, 6, 2, "failed", client="b")]
    assert check(one).linearizable
    # A create refused while the key was absent all along.
    assert check([op("create", 0, 1, 1, "failed")]).linearizable is False
    # A create with an unknown outcome applies only where the key is absent.
    assert check([op("put", 0, 1, 1), op("create", 2, INF, 2), op("get", 5, 6, 2)]).linearizable is False
    assert check([op("delete", 0, 1), op("create", 2, INF, 2), op("get", 5, 6, 2)]).linearizable


def test_conditional_replaces():
    chain = [op("put", 0, 1, 1), op("replace", 2, 3, 2, expected=1), op("get", 4, 5, 2)]
    assert check(chain).linearizable
    stale = [op("put", 0, 1, 1), op("put", 2, 3, 3), op("replace", 4, 5, 2, expected=1)]
    assert check(stale).linearizable is False
    refused = [op("put", 0, 1, 1), op("put", 2, 3, 3), op("replace", 4, 5, 2, "failed", expected=1)]
    assert check(refused).linearizable
    assert check([op("replace", 0, 1, 2, "absent", expected=1)]).linearizable
    assert check([op("put", 0, 1, 1), op("replace", 2, 3, 2, "absent", expected=1)]).linearizable is False
    assert check([op("replace", 0, 1, 2, "failed", expected=1)]).linearizable is False


def test_conditional_deletes():
    gone = [op("put", 0, 1, 1), op("remove", 2, 3, expected=1), op("get", 4, 5, None)]
    assert check(gone).linearizable
    assert check(gone[:2] + [op("get", 4, 5, 1)]).linearizable is False
    # Two deletes of the same value: only one can find it there.
    twice = [op("put", 0, 1, 1), op("remove", 2, 5, expected=1, client="a"),
             op("remove", 3, 6, expected=1, client="b")]
    assert check(twice).linearizable is False
    twice[2].outcome = "absent"
    assert check(twice).linearizable
    stale = [op("put", 0, 1, 1), op("put", 2, 3, 2), op("remove", 4, 5, expected=1)]
    assert check(stale).linearizable is False
    stale[2].outcome = "failed"
    assert check(stale).linearizable
    # One whose outcome is unknown deletes only where the key holds the value it names.
    assert check([op("put", 0, 1, 2), op("remove", 2, INF, expected=1), op("get", 5, 6, None)]).linearizable is False
    assert check([op("put", 0, 1, 1), op("remove", 2, INF, expected=1), op("get", 5, 6, None)]).linearizable


def brute_force(ops, initial=None) -> bool:
    """Every order of the operations that keeps real time, through the model."""
    ops = [o for o in ops if not (o.kind == "get" and o.returned is None)]

    def before(a, b):  # a answered before b was sent
        return a.returned is not None and a.returned < b.invoked

    for order in itertools.permutations(ops):
        if any(before(order[j], order[i]) for i in range(len(order)) for j in range(i + 1, len(order))):
            continue
        state, fine = initial, True
        for o in order:
            fine, state = step(state, o)
            if not fine:
                break
        if fine:
            return True
    return False


def random_history(rng: random.Random, count: int) -> list[Operation]:
    ops = []
    for i in range(count):
        start = rng.randrange(20)
        end = None if rng.random() < 0.15 else start + rng.randrange(1, 8)
        kind = rng.choice(["get", "get", "put", "delete", "create", "replace", "remove"])
        value = rng.choice([None, 1, 2]) if kind == "get" else None if kind == "remove" else 10 + i
        outcome = rng.choice(["ok", "ok", "failed", "absent" if kind in ("replace", "remove") else "failed"])
        ops.append(op(kind, start, end, value, outcome, expected=rng.choice([1, 2, 11, 12]),
                      client=f"c{i}"))
        if kind in ("put", "create", "replace") and rng.random() < 0.5:
            ops[-1].value = rng.choice([1, 2])  # values the reads can see
    return ops


def test_the_search_agrees_with_every_order_on_random_histories():
    rng = random.Random(20261207)
    answers = {True: 0, False: 0}
    for _ in range(600):
        history = random_history(rng, rng.randrange(1, 7))
        expected = brute_force(history)
        assert check(history).linearizable is expected, history
        answers[expected] += 1
    assert min(answers.values()) > 100, answers  # both answers well represented


def test_a_search_out_of_budget_decides_nothing():
    history = [op("put", 0, 100, i, client=f"c{i}") for i in range(12)]
    history += [op("get", 101, 102, 3), op("get", 103, 104, 5), op("get", 105, 106, 3)]
    verdict = check(history, budget=50)
    assert verdict.linearizable is None
    assert check(history).linearizable is False


def test_the_recorder_and_saved_histories(tmp_path):
    rec = Recorder()
    w = rec.begin("k", "a", "put", value=1)
    rec.finish(w, outcome="ok")
    r = rec.begin("k", "b", "get")
    rec.finish(r, value=2)
    gone = rec.begin("k", "b", "get")
    rec.drop("k", gone)
    lost = rec.begin("j", "a", "put", value=3)
    rec.unknown(lost, "503")
    assert rec.count() == 3
    report = check_all(rec.by_key, tmp_path / "artifacts")
    assert report.keys == 2 and report.operations == 3 and report.unknown == 1
    assert [key for key, _, _ in report.failures] == ["k"]
    key, saved = load(report.failures[0][2])
    assert key == "k" and saved == rec.by_key["k"]
    save(tmp_path / "again.json", key, saved)
    assert load(tmp_path / "again.json") == (key, saved)


@pytest.mark.parametrize("unknown", [0, 8, 16])
def test_long_concurrent_histories_are_decided(unknown):
    """Four clients, 400 operations on one key with some outcomes unknown: the size the fault test
    records per key. Generated from a real register, so linearizable."""
    rng = random.Random(unknown)
    state, ops, now = None, [], 0.0
    clients = [f"c{i}" for i in range(4)]
    lost = set(rng.sample(range(400), unknown))
    for i in range(400):
        now += rng.uniform(0.1, 1.0)
        kind = rng.choice(["get", "get", "put", "delete", "create", "replace", "remove"])
        o = op(kind, now - rng.uniform(0, 2), now, None if kind == "remove" else 1000 + i,
               client=rng.choice(clients))
        if kind == "get":
            o.value = state
        elif kind in ("replace", "remove"):
            o.expected = state if rng.random() < 0.5 else 1000 + rng.randrange(i + 1)
        ok, after = step(state, o)
        if not ok:  # the outcome the register gives
            o.outcome = "absent" if kind in ("replace", "remove") and state is None else "failed"
            ok, after = step(state, o)
        assert ok
        state = after
        if i in lost and kind != "get":
            o.returned, o.outcome = None, None
        ops.append(o)
    verdict = check(ops)
    assert verdict.linearizable, verdict


def test_the_cluster_simulation_histories_are_linearizable(tmp_path):
    """cluster_sim's random workload (4 nodes, cut-offs, resets, lost answers, bit rot or a replaced
    drive, healing meanwhile) with its clients also racing on shared keys: every seed's history of
    every key must be linearizable. A failing one is kept under build/test-artifacts/."""
    sim = binary_path().parent / "tests" / "sim" / "cluster_sim"
    assert sim.exists(), f"{sim} is not built (make build)"
    run = subprocess.run([str(sim), "--seeds", str(SIM_SEEDS), "--history", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    problems, operations, keys = [], 0, 0
    for seed in range(1, SIM_SEEDS + 1):
        report = check_all(load_keys(tmp_path / f"seed-{seed}.json"), ARTIFACTS / f"sim-seed-{seed}")
        operations += report.operations
        keys += report.keys
        problems += [f"seed {seed}, {key}: {v.explain()}; history in {path}"
                     for key, v, path in report.failures + report.undecided]
    assert not problems, "\n".join(problems[:20])
    assert operations > 50 * SIM_SEEDS, operations  # the histories are not empty
    print(f"{operations} operations on {keys} keys of {SIM_SEEDS} seeds: linearizable")
