"""Per-key linearizability of recorded histories (docs/cluster.md, "Histories checked").

A history is every operation a test's clients sent to one key: when each was invoked and when its answer
came (time.monotonic on the test's machine), what it asked and what it got. The model is a register of
one S3 key whose value is a number naming the bytes written (None: absent):

- `get` answers the value or None;
- `put` writes a value unconditionally; `delete` makes the key absent (both always succeed);
- `create` writes only if the key is absent (If-None-Match: *): "ok" or "failed" (412);
- `replace` writes only if the key holds `expected` (If-Match with the ETag of that value): "ok",
  "failed" (412, it holds another) or "absent" (404, it holds none);
- `remove` deletes only if the key holds `expected` (DELETE with If-Match), with the same answers.

An operation whose outcome the client does not know (a 5xx, a broken connection) may take effect at any
time after it was invoked, or never: its answer time is infinite and any outcome the model allows is
accepted. A read that failed carries no information and is left out.

The check is Wing and Gong's search with Lowe's memoization of (operations linearized, state), the
algorithm of Porcupine (Anish Athalye's Go checker): walk the calls and answers in time order, linearize
a pending call whenever the model accepts it, and back off at an answer whose operation is not yet
linearized. Written here rather than built from Go so the tests need no Go toolchain; the algorithm is
small and `test_linearizability.py` checks it against histories whose answer is known. The search is
exponential in the worst case, so it stops after `budget` steps and says it could not decide.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

KINDS = ("get", "put", "delete", "create", "replace", "remove")
IF_MATCH = ("replace", "remove")
OUTCOMES = ("ok", "failed", "absent")


@dataclass
class Operation:
    client: str
    kind: str
    invoked: float
    returned: float | None = None   # None: the outcome is unknown (the answer never came)
    value: int | None = None        # get: what it read (None: absent); writes: what they write
    expected: int | None = None     # replace, remove: the value their If-Match named
    outcome: str | None = None      # writes: "ok", "failed" or "absent"; None while unknown
    note: str = ""                  # free text for the report (node, error)


def step(state, op: Operation):
    """The model's transition: (accepted, next state)."""
    if op.kind == "get":
        return op.value == state, state
    known = op.returned is not None
    if op.kind == "put":
        return True, op.value
    if op.kind == "delete":
        return True, None
    if op.kind == "create":
        holds = state is None
        if not known:
            return True, op.value if holds else state
        return (holds, op.value) if op.outcome == "ok" else (not holds and op.outcome == "failed", state)
    if op.kind in IF_MATCH:
        holds = state is not None and state == op.expected
        after = op.value if op.kind == "replace" else None
        if not known:
            return True, after if holds else state
        if op.outcome == "ok":
            return holds, after
        if op.outcome == "absent":
            return state is None, state
        return state is not None and not holds, state
    raise ValueError(f"unknown operation {op.kind!r}")


@dataclass
class Verdict:
    linearizable: bool | None   # None: the search ran out of its budget
    steps: int
    # When not linearizable: the operation whose answer no order of the calls before it could explain
    # (from the deepest point the search reached), with the state it found there.
    stuck_at: Operation | None = None
    stuck_state: object = None
    reason: str = ""

    def explain(self) -> str:
        if self.linearizable is None:
            return f"undecided after {self.steps} steps"
        if self.reason:
            return f"no order explains {describe(self.stuck_at)}: {self.reason}"
        return (f"no order explains {describe(self.stuck_at)} (the register holds "
                f"{self.stuck_state} where the search got furthest)")


def unobserved(ops: list[Operation]) -> set[int]:
    """The writes with unknown outcomes that no order needs (indexes into `ops`): no read saw their
    value, no If-Match named it, and no refusal (412) could have come after them. Such a write can go
    last in any order, where it changes nothing anyone saw, so leaving it out decides the same. Each
    pending write doubles the search's states, and a history that is not linearizable is searched
    through all of them.

    Why it is sound: in an order where such a write w applies, the operations after it until the next
    change see its value; reads would return it and a conditional write would be refused or name it,
    and none does, so the next operation is an unconditional write or delete, or a pending conditional
    write that w's value refuses (moved last too). Without w they all still hold."""
    seen = {op.value for op in ops if op.kind == "get" and op.returned is not None}
    named = {op.expected for op in ops if op.kind in IF_MATCH}
    out = set()
    for i, w in enumerate(ops):
        if w.returned is not None or w.kind not in ("put", "create", "replace"):
            continue
        if w.value in seen or w.value in named:
            continue
        if any(o.outcome == "failed" and o.returned is not None and o.returned >= w.invoked
               for o in ops):
            continue
        out.add(i)
    return out


def pinned(ops: list[Operation]) -> list[Operation]:
    """The writes with unknown outcomes that a read saw (their value written by no other operation),
    made known: such a write applied, and before the first answer that shows its value, so any order
    has it there. The search then stops carrying it as a call that may come at any time."""
    writers: dict = {}
    for i, op in enumerate(ops):
        if op.kind in ("put", "create", "replace"):
            writers.setdefault(op.value, []).append(i)
    out = list(ops)
    for v, who in writers.items():
        if len(who) != 1 or ops[who[0]].returned is not None:
            continue
        shown = [o.returned for o in ops if o.returned is not None and (
            (o.kind == "get" and o.value == v) or
            (o.kind in IF_MATCH and o.expected == v and o.outcome == "ok"))]
        if shown:
            out[who[0]] = replace(ops[who[0]], returned=min(shown), outcome="ok")
    return out


def stale_read(ops: list[Operation]):
    """A read that no order can explain for a plain reason: it returned the value of a write that
    answered before another write with an effect was sent, and that other write answered before the
    read was sent (values are written once, so the value cannot come back). Found at once, where the
    search would have to try every order to give up."""
    effect = sorted((o.invoked, o.returned) for o in ops if o.returned is not None and (
        o.kind in ("put", "delete") or (o.kind in ("create", *IF_MATCH) and o.outcome == "ok")))
    writer_of = {}
    for o in ops:
        if o.kind in ("put", "create", "replace"):
            writer_of.setdefault(o.value, []).append(o)
    for r in ops:
        if r.kind != "get" or r.value is None or r.returned is None:
            continue
        ws = writer_of.get(r.value, [])
        if len(ws) != 1 or ws[0].returned is None:
            continue
        w = ws[0]
        if any(w.returned < inv and ret < r.invoked for inv, ret in effect):
            return r
    return None


def check(ops: list[Operation], initial=None, budget: int = 2_000_000) -> Verdict:
    """Is there a total order of `ops` that respects real time (an operation answered before another
    was invoked comes first) and that the model accepts, starting from `initial`?"""
    ops = [op for op in ops if not (op.kind == "get" and op.returned is None)]
    written = {op.value for op in ops if op.kind in ("put", "create", "replace")} | {initial}
    for op in ops:
        if op.kind == "get" and op.value not in written:
            return Verdict(False, 0, op, None)  # a value nobody wrote
    skip = unobserved(ops)
    ops = pinned([op for i, op in enumerate(ops) if i not in skip])
    if (stale := stale_read(ops)) is not None:
        return Verdict(False, 0, stale, reason="a write with an effect came between its value's "
                       "write and the read")
    events = []
    for i, op in enumerate(ops):
        events.append((op.invoked, 0, i))
        events.append((op.returned if op.returned is not None else math.inf, 1, i))
    # At equal times the call comes first: the two may have overlapped.
    events.sort()
    # A doubly linked list of the events, node 0 the head; lifting an operation unlinks its call and
    # its answer, and unlifting links them back in reverse (the search's stack is last in, first out).
    size = len(events) + 1
    nxt = list(range(1, size + 1))
    nxt[-1] = 0
    prv = list(range(-1, size - 1))
    op_of = [-1] + [e[2] for e in events]
    is_call = [False] + [e[1] == 0 for e in events]
    answer_of = [0] * size
    where = {}
    for node in range(1, size):
        if is_call[node]:
            where[op_of[node]] = node
    for node in range(1, size):
        if not is_call[node]:
            answer_of[where[op_of[node]]] = node

    def unlink(node):
        nxt[prv[node]] = nxt[node]
        if nxt[node]:
            prv[nxt[node]] = prv[node]

    def relink(node):
        nxt[prv[node]] = node
        if nxt[node]:
            prv[nxt[node]] = node

    # Operations with unknown outcomes never have to be linearized: whatever is left of them goes
    # last, where each applies or not and no one sees it. So the search is done once every operation
    # with an answer is in, it puts one of the others in only where it changes the state (elsewhere it
    # may as well go last), and a configuration is dominated by one with the same operations answered,
    # the same state and a subset of the unanswered ones in (the latter can still do all it can).
    known = sum(1 << i for i, op in enumerate(ops) if op.returned is not None)
    state, done, steps = initial, 0, 0
    seen: dict = {}
    stack = []
    deepest, stuck_at, stuck_state = -1, None, None
    entry = nxt[0]
    while done & known != known:
        steps += 1
        if steps > budget:
            return Verdict(None, steps)
        if is_call[entry]:
            i = op_of[entry]
            accepted, after = step(state, ops[i])
            if ops[i].returned is None and after == state:
                accepted = False
            if accepted and not dominated(seen, done | (1 << i), known, after):
                stack.append((entry, state))
                state, done = after, done | (1 << i)
                unlink(entry)
                unlink(answer_of[entry])
                entry = nxt[0]
                continue
            entry = nxt[entry]
            continue
        # An answer whose operation is not linearized yet: this order cannot go on.
        if len(stack) > deepest:
            deepest, stuck_at, stuck_state = len(stack), ops[op_of[entry]], state
        if not stack:
            return Verdict(False, steps, stuck_at, stuck_state)
        entry, state = stack.pop()
        done &= ~(1 << op_of[entry])
        relink(answer_of[entry])
        relink(entry)
        entry = nxt[entry]
    return Verdict(True, steps)


def dominated(seen: dict, done: int, known: int, state) -> bool:
    """Was a configuration that can do all this one can already entered? Records this one if not."""
    pending = done & ~known
    entered = seen.setdefault((done & known, state), [])
    if any(old & ~pending == 0 for old in entered):
        return True
    entered.append(pending)
    return False


class Recorder:
    """Collects the operations of many client threads, by key. `begin` before sending a request,
    then exactly one of `finish` (the answer came), `unknown` (it did not: the request may still take
    effect) or `drop` (a read that failed). Operations are appended under a lock; each is filled in
    only by the thread that began it."""

    def __init__(self):
        self._lock = threading.Lock()
        self.by_key: dict[str, list[Operation]] = {}

    def begin(self, key: str, client: str, kind: str, value=None, expected=None, note="") -> Operation:
        assert kind in KINDS
        op = Operation(client=client, kind=kind, invoked=time.monotonic(), value=value,
                       expected=expected, note=note)
        with self._lock:
            self.by_key.setdefault(key, []).append(op)
        return op

    @staticmethod
    def finish(op: Operation, value=None, outcome: str | None = None):
        op.returned = time.monotonic()
        if op.kind == "get":
            op.value = value
        else:
            assert outcome in OUTCOMES
            op.outcome = outcome

    @staticmethod
    def unknown(op: Operation, why: str = ""):
        op.returned = None
        op.note = (op.note + " " + why).strip()

    def drop(self, key: str, op: Operation):
        with self._lock:
            self.by_key[key] = [o for o in self.by_key[key] if o is not op]

    def count(self) -> int:
        with self._lock:
            return sum(len(ops) for ops in self.by_key.values())


@dataclass
class Report:
    keys: int = 0
    operations: int = 0
    unknown: int = 0
    steps: int = 0
    most_steps: int = 0  # of one key: how close a search came to its budget
    failures: list = field(default_factory=list)    # (key, verdict, artifact path)
    undecided: list = field(default_factory=list)   # keys whose search ran out of budget


def check_all(by_key: dict[str, list[Operation]], artifacts: Path, budget: int = 2_000_000) -> Report:
    """Checks every key; a history that fails or cannot be decided is written to `artifacts` as JSON
    (one file per key) for replay with `check_file`."""
    report = Report()
    for key, ops in sorted(by_key.items()):
        report.keys += 1
        report.operations += len(ops)
        report.unknown += sum(1 for op in ops if op.returned is None and op.kind != "get")
        verdict = check(ops, budget=budget)
        report.steps += verdict.steps
        report.most_steps = max(report.most_steps, verdict.steps)
        if verdict.linearizable:
            continue
        artifacts.mkdir(parents=True, exist_ok=True)
        path = artifacts / (key.replace("/", "_") + ".json")
        save(path, key, ops)
        if verdict.linearizable is None:
            report.undecided.append((key, verdict, path))
        else:
            report.failures.append((key, verdict, path))
    return report


def save(path: Path, key: str, ops: list[Operation]):
    path.write_text(json.dumps({"key": key, "operations": [asdict(op) for op in ops]}, indent=1))


def load(path: Path) -> tuple[str, list[Operation]]:
    data = json.loads(Path(path).read_text())
    return data["key"], [Operation(**op) for op in data["operations"]]


def load_keys(path: Path) -> dict[str, list[Operation]]:
    """A history of many keys, as tests/sim/cluster_sim.cc --history writes it: {"keys": {key: [...]}}."""
    data = json.loads(Path(path).read_text())
    return {key: [Operation(**op) for op in ops] for key, ops in data["keys"].items()}


def describe(op: Operation | None) -> str:
    if op is None:
        return "-"
    what = {"get": f"get -> {op.value}", "put": f"put {op.value}", "delete": "delete",
            "create": f"create {op.value}", "replace": f"replace {op.expected} with {op.value}",
            "remove": f"delete if {op.expected}"}[op.kind]
    if op.kind != "get":
        what += f" -> {op.outcome or 'unknown'}"
    answered = "never" if op.returned is None else f"{op.returned:.3f}"
    return f"{what} by {op.client} [{op.invoked:.3f}, {answered}] {op.note}".strip()


if __name__ == "__main__":  # replays a saved history: python linearizability.py FILE
    import sys

    key, history = load(Path(sys.argv[1]))
    v = check(history, budget=50_000_000)
    print(f"{key}: {len(history)} operations, linearizable={v.linearizable} after {v.steps} steps; "
          f"stuck at {describe(v.stuck_at)} with state {v.stuck_state}")
