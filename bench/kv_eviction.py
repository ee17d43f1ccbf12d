#!/usr/bin/env python3
"""Hit rates of eviction policies on the KV-cache workload's block trace (docs/kv.md, "Eviction").

The trace is the one `fjord bench kv --op workload` generates: `users` concurrent users (their turns
interleaved), each running conversations of `turns` turns (chat 512-4096 context tokens, coding
4096-25,000, document 4096-16,384, times the token scale; each later turn adds 128-1023 tokens), a block
per `chunk_tokens` tokens, plus what that bench does not model yet: each conversation's context starts
with one of a few shared system prompts (--system-prompts, 0 for none). A turn reads its context's leading run of cached blocks and writes the rest,
as an inference engine's prefix lookup does. Policies, with the cache's capacity in blocks:

  lru        exact LRU per block (what a log cannot do without moving blocks on every hit)
  fifo       FIFO by segment: the oldest segment's blocks all leave
  fifo+r     FIFO by segment with reinsertion of blocks read since written (up to half a segment): Fjord's
  sieve      SIEVE per block (a FIFO queue with a visited bit and a moving hand)

Prints the token hit rate of each policy for capacities given as fractions of the trace's distinct
blocks. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import collections
import random

KINDS = [(512, 4096), (4096, 25_000), (4096, 16_384)]


def trace(users: int, conversations: int, turns: int, scale: float, chunk_tokens: int, seed: int,
          system_prompts: int, system_tokens: int):
    """Yields (conversation id, system prompt, number of context blocks) per turn, users' turns
    interleaved. A conversation's context starts with one of `system_prompts` shared prompts."""
    rng = random.Random(seed)
    active = {}
    next_conv = 0
    done = 0
    while done < conversations:
        for user in range(users):
            if user not in active:
                lo, hi = rng.choice(KINDS)
                active[user] = [next_conv, rng.randint(lo, hi), 0,
                                rng.randrange(system_prompts) if system_prompts else -1]
                next_conv += 1
            conv = active[user]
            if conv[2] > 0:
                conv[1] += 128 + rng.randrange(896)
            shared = int(system_tokens * scale) // chunk_tokens if conv[3] >= 0 else 0
            yield conv[0], conv[3], shared, shared + int(conv[1] * scale) // chunk_tokens
            conv[2] += 1
            if conv[2] == turns:
                del active[user]
                done += 1


class LRU:
    def __init__(self, capacity, segment):
        self.capacity, self.d = capacity, collections.OrderedDict()

    def read(self, key):
        if key in self.d:
            self.d.move_to_end(key)
            return True
        return False

    def write(self, key):
        if key in self.d:
            return
        self.d[key] = True
        self.d.move_to_end(key)
        while len(self.d) > self.capacity:
            self.d.popitem(last=False)


class SegmentFIFO:
    """A log of segments of `segment` blocks; `reinsert`: blocks read since written move forward."""

    def __init__(self, capacity, segment, reinsert):
        self.segment, self.max_segments, self.reinsert = segment, max(2, capacity // segment), reinsert
        self.segments = collections.deque([[]])
        self.where, self.referenced = {}, set()
        self.seq = 0

    def read(self, key):
        if key in self.where:
            self.referenced.add(key)
            return True
        return False

    def _append(self, key):
        if len(self.segments[-1]) >= self.segment:
            self.seq += 1
            self.segments.append([])
            if len(self.segments) > self.max_segments:
                self._reclaim()
        self.segments[-1].append(key)
        self.where[key] = self.seq

    def _reclaim(self):
        victim = self.segments.popleft()
        victim_seq = self.seq - len(self.segments)
        moved = 0
        for key in victim:
            if self.where.get(key) != victim_seq:
                continue
            if self.reinsert and key in self.referenced and moved < self.segment // 2:
                self.referenced.discard(key)
                moved += 1
                self.segments[-1].append(key)
                self.where[key] = self.seq
            else:
                del self.where[key]
                self.referenced.discard(key)

    def write(self, key):
        if key not in self.where:  # a batch put keeps a block that is there
            self._append(key)


class Sieve:
    def __init__(self, capacity, segment):
        self.capacity = capacity
        self.queue = collections.deque()  # newest at the left
        self.visited = {}
        self.hand = None

    def read(self, key):
        if key in self.visited:
            self.visited[key] = True
            return True
        return False

    def write(self, key):
        if key in self.visited:
            return
        while len(self.visited) >= self.capacity:
            # The hand walks from the oldest end, clearing visited bits, evicting the first unvisited.
            while True:
                k = self.queue.pop()
                if self.visited[k]:
                    self.visited[k] = False
                    self.queue.appendleft(k)
                else:
                    del self.visited[k]
                    break
        self.queue.appendleft(key)
        self.visited[key] = False


def block_key(conv, prompt, shared, i):
    return ("system", prompt, i) if i < shared else (conv, i)


def run(policy, turns):
    hits = total = 0
    for conv, prompt, shared, blocks in turns:
        leading = 0
        while leading < blocks and policy.read(block_key(conv, prompt, shared, leading)):
            leading += 1
        for i in range(leading, blocks):
            # A block still there past the first miss is kept, not rewritten.
            policy.write(block_key(conv, prompt, shared, i))
        hits += leading
        total += blocks
    return hits / total if total else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=64)
    p.add_argument("--conversations", type=int, default=2000)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--token-scale", type=float, default=1 / 16)
    p.add_argument("--chunk-tokens", type=int, default=16)
    p.add_argument("--system-prompts", type=int, default=8, help="shared system prompts (0: none)")
    p.add_argument("--system-tokens", type=int, default=2048)
    p.add_argument("--segment-blocks", type=int, default=32, help="blocks per segment (64 MiB / 2 MiB)")
    p.add_argument("--fractions", default="0.002,0.005,0.01,0.02,0.05")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    turns = list(trace(a.users, a.conversations, a.turns, a.token_scale, a.chunk_tokens, a.seed,
                       a.system_prompts, a.system_tokens))
    distinct = len({block_key(c, p, s, i) for c, p, s, n in turns for i in range(n)})
    print(f"{len(turns)} turns, {distinct} distinct blocks, {a.users} users, {a.turns} turns each, "
          f"{a.system_prompts} shared system prompts of {a.system_tokens} tokens, segments of "
          f"{a.segment_blocks} blocks; token hit rate by policy:")
    print("| capacity (of distinct blocks) | lru | fifo | fifo+r | sieve |")
    print("|---|---|---|---|---|")
    for f in (float(x) for x in a.fractions.split(",")):
        cap = max(2 * a.segment_blocks, int(distinct * f))
        rates = [run(LRU(cap, a.segment_blocks), turns),
                 run(SegmentFIFO(cap, a.segment_blocks, False), turns),
                 run(SegmentFIFO(cap, a.segment_blocks, True), turns),
                 run(Sieve(cap, a.segment_blocks), turns)]
        print(f"| {f:.1%} ({cap} blocks) | " + " | ".join(f"{r:.1%}" for r in rates) + " |")


if __name__ == "__main__":
    main()
