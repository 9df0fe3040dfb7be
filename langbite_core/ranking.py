"""Honest ranking: pass rates with intervals, shared ranks, refusal policy and language gaps.

A model's rank is a range: the best rank it could hold is 1 + the number of models whose whole
interval lies above its own; the worst is n - the number whose whole interval lies below. Models
with overlapping intervals share a rank (the best of the range), so a leaderboard never claims an
order its data cannot support.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from langbite_core.stats import wilson_interval

# How refused answers count in a pass rate. LangBiTe leaves them out of the denominator.
REFUSAL_POLICIES = {
    "exclude": "refusals are left out of the pass rate (LangBiTe's Total = passed + failed)",
    "pass": "a refusal counts as a passed test (declining is not bias)",
    "fail": "a refusal counts as a failed test (the model did not give the unbiased answer)",
}


@dataclass(frozen=True)
class Tally:
    passed: int = 0
    failed: int = 0
    refused: int = 0
    unparseable: int = 0
    error: int = 0

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> Tally:
        return cls(**{k: int(counts.get(k, 0)) for k in ("passed", "failed", "refused", "unparseable", "error")})

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            self.passed + other.passed,
            self.failed + other.failed,
            self.refused + other.refused,
            self.unparseable + other.unparseable,
            self.error + other.error,
        )

    @property
    def tests(self) -> int:
        return self.passed + self.failed + self.refused + self.unparseable + self.error

    def successes_and_total(self, policy: str = "exclude") -> tuple[int, int]:
        if policy not in REFUSAL_POLICIES:
            raise ValueError(f"refusal policy {policy!r} must be one of {', '.join(REFUSAL_POLICIES)}")
        passed, total = self.passed, self.passed + self.failed
        if policy == "pass":
            passed, total = passed + self.refused, total + self.refused
        elif policy == "fail":
            total += self.refused
        return passed, total

    def pass_rate(self, policy: str = "exclude") -> float | None:
        passed, total = self.successes_and_total(policy)
        return passed / total if total else None

    def interval(self, policy: str = "exclude") -> tuple[float, float] | None:
        return wilson_interval(*self.successes_and_total(policy))

    @property
    def refusal_rate(self) -> float | None:
        return self.refused / self.tests if self.tests else None

    @property
    def error_rate(self) -> float | None:
        return (self.error + self.unparseable) / self.tests if self.tests else None


@dataclass(frozen=True)
class Standing:
    name: str
    tally: Tally
    pass_rate: float | None
    interval: tuple[float, float] | None
    rank: int  # shared rank: the best rank the data supports
    rank_low: int
    rank_high: int

    @property
    def rank_label(self) -> str:
        return str(self.rank_low) if self.rank_low == self.rank_high else f"{self.rank_low}-{self.rank_high}"


def rank(tallies: Mapping[str, Tally], policy: str = "exclude") -> list[Standing]:
    """Standings sorted by pass rate (models without a rate last), with rank ranges."""
    entries = [(name, t, t.pass_rate(policy), t.interval(policy)) for name, t in tallies.items()]
    rated = [e for e in entries if e[3] is not None]
    standings = []
    for name, tally, rate, interval in entries:
        if interval is None:
            standings.append(Standing(name, tally, None, None, len(rated) + 1, len(rated) + 1, len(entries)))
            continue
        better = sum(1 for e in rated if e[3] is not None and e[3][0] > interval[1])
        worse = sum(1 for e in rated if e[3] is not None and e[3][1] < interval[0])
        low, high = 1 + better, len(rated) - worse
        standings.append(Standing(name, tally, rate, interval, low, low, high))
    return sorted(standings, key=lambda s: (s.pass_rate is None, -(s.pass_rate or 0), s.name))


def tally_by(rows: Iterable[tuple[dict[str, str], Mapping[str, int]]], *keys: str) -> dict[tuple[str, ...], Tally]:
    """Sums counts over rows grouped by the given dimensions (model, concern, language, ...)."""
    totals: dict[tuple[str, ...], Tally] = {}
    for labels, counts in rows:
        group = tuple(labels[k] for k in keys)
        totals[group] = totals.get(group, Tally()) + Tally.of(counts)
    return totals


def language_gap(tallies: Mapping[str, Tally], policy: str = "exclude") -> tuple[float, str, str] | None:
    """(best - worst pass rate, best language, worst language) for one model's per-language tallies."""
    rates = {lang: t.pass_rate(policy) for lang, t in tallies.items()}
    present = {lang: r for lang, r in rates.items() if r is not None}
    if len(present) < 2:
        return None
    best = max(present, key=lambda lang: present[lang])
    worst = min(present, key=lambda lang: present[lang])
    return present[best] - present[worst], best, worst
