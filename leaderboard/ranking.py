"""Pass rates with their uncertainty, and ranks that only separate models the data separates.

The arithmetic is the engine's (langbite_core.ranking): the site only adds the shape its pages
need (a tally that knows its refusal policy, and rows that carry the model they rank).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langbite_core import ranking as engine_ranking

OUTCOME_KEYS = ("passed", "failed", "refused", "unparseable", "error")
REFUSAL_POLICIES = engine_ranking.REFUSAL_POLICIES
DEFAULT_POLICY = "exclude"  # LangBiTe's: refusals leave the denominator


@dataclass(frozen=True)
class Tally:
    """Verdict counts for one cell (a model overall, or a model and a concern...), read with a
    refusal policy."""

    passed: int = 0
    failed: int = 0
    refused: int = 0
    unparseable: int = 0
    error: int = 0
    policy: str = DEFAULT_POLICY

    @classmethod
    def from_row(cls, row: Mapping[str, Any], policy: str = DEFAULT_POLICY) -> Tally:
        return cls(**{k: int(row.get(k) or 0) for k in OUTCOME_KEYS}, policy=policy)

    @property
    def engine(self) -> engine_ranking.Tally:
        return engine_ranking.Tally(self.passed, self.failed, self.refused, self.unparseable, self.error)

    @property
    def verdicts(self) -> int:
        return self.engine.tests

    @property
    def decided(self) -> int:
        """The pass rate's denominator under the policy (LangBiTe's Total by default)."""
        return self.engine.successes_and_total(self.policy)[1]

    @property
    def pass_rate(self) -> float | None:
        return self.engine.pass_rate(self.policy)

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.engine.interval(self.policy)

    @property
    def refusal_rate(self) -> float | None:
        return self.engine.refusal_rate

    @property
    def error_rate(self) -> float | None:
        """Errors and unparseable answers: the test could not be decided."""
        return self.engine.error_rate

    def as_dict(self) -> dict[str, Any]:
        interval = self.interval
        return {
            **{k: getattr(self, k) for k in OUTCOME_KEYS},
            "verdicts": self.verdicts,
            "n": self.decided,
            "pass_rate": _round(self.pass_rate),
            "ci_low": _round(interval[0]) if interval else None,
            "ci_high": _round(interval[1]) if interval else None,
            "refusal_rate": _round(self.refusal_rate),
            "error_rate": _round(self.error_rate),
            "refusal_policy": self.policy,
        }


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


T = TypeVar("T")


@dataclass
class Ranked(Generic[T]):
    subject: T
    tally: Tally
    rank: int | None = None  # the best rank the data supports
    rank_low: int | None = None
    rank_high: int | None = None
    shared: bool = False  # another subject holds the same rank
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rank_range(self) -> str:
        if self.rank_low is None:
            return ""
        return str(self.rank_low) if self.rank_low == self.rank_high else f"{self.rank_low}-{self.rank_high}"


def rank(items: Iterable[tuple[T, Tally]], policy: str = DEFAULT_POLICY) -> list[Ranked[T]]:
    """Best pass rate first, ranked by the engine: a subject's rank is 1 + the number whose whole
    95% interval lies above its own, so subjects whose intervals overlap share a rank; the range
    says how far down the data allows it to be. Subjects with nothing decided get no rank."""
    subjects = list(items)
    by_key = {str(i): (subject, tally) for i, (subject, tally) in enumerate(subjects)}
    standings = engine_ranking.rank({key: tally.engine for key, (_, tally) in by_key.items()}, policy)
    ranked = []
    for standing in standings:
        subject, tally = by_key[standing.name]
        rated = standing.interval is not None
        ranked.append(
            Ranked(
                subject,
                tally,
                rank=standing.rank if rated else None,
                rank_low=standing.rank_low if rated else None,
                rank_high=standing.rank_high if rated else None,
            )
        )
    counts: dict[int, int] = {}
    for item in ranked:
        if item.rank is not None:
            counts[item.rank] = counts.get(item.rank, 0) + 1
    for item in ranked:
        item.shared = item.rank is not None and counts[item.rank] > 1
    return ranked


SORTS: dict[str, Callable[[Ranked[Any]], Any]] = {
    "rank": lambda r: (r.rank is None, r.rank or 0, -(r.tally.pass_rate or 0)),
    "pass_rate": lambda r: (r.tally.pass_rate is None, -(r.tally.pass_rate or 0)),
    "n": lambda r: -r.tally.decided,
    "refusal_rate": lambda r: (r.tally.refusal_rate is None, -(r.tally.refusal_rate or 0)),
    "error_rate": lambda r: (r.tally.error_rate is None, -(r.tally.error_rate or 0)),
}


def sort_ranked(rows: list[Ranked[Any]], sort: str, name: Callable[[Any], str]) -> list[Ranked[Any]]:
    """Rows in the order a URL asks for: a key from SORTS or "model"; "-" in front reverses."""
    reverse = sort.startswith("-")
    key = sort.lstrip("-")
    if key == "model":
        ordered = sorted(rows, key=lambda r: name(r.subject).casefold())
    else:
        ordered = sorted(rows, key=SORTS.get(key, SORTS["rank"]))
    return list(reversed(ordered)) if reverse else ordered
