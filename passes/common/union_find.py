"""Union-find over the integers 0..n-1, each class named by its smallest member (so the
classes' names do not depend on the order of the unions): the solver's value groups
(solver/problem.py) and its tied layers (solver/repeats.py)."""

from __future__ import annotations


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)
