"""Site glue around the engine's ranking (langbite_core.ranking), which does all the arithmetic:
pass rates, Wilson intervals, shared ranks and rank ranges, refusal policies and language gaps.

Two things are the site's own: templates cannot pass a refusal policy as an argument, so a
Reading carries an engine Tally together with the policy chosen in the URL; and pages rank
objects (models), so a Ranked row carries its subject next to the engine's Standing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from langbite_core.ranking import REFUSAL_POLICIES, Standing, Tally
from langbite_core.ranking import rank as engine_rank

OUTCOME_KEYS = ("passed", "failed", "refused", "unparseable", "error")
DEFAULT_POLICY = "exclude"  # LangBiTe's: refusals leave the denominator

__all__ = ["DEFAULT_POLICY", "OUTCOME_KEYS", "REFUSAL_POLICIES", "SORTS", "Ranked", "Reading", "rank", "sort_ranked"]


@dataclass(frozen=True)
class Reading:
    """An engine Tally read under one refusal policy."""

    tally: Tally = field(default_factory=Tally)
    policy: str = DEFAULT_POLICY

    @classmethod
    def of(cls, counts: Mapping[str, Any], policy: str = DEFAULT_POLICY) -> Reading:
        """From a row of outcome counts (a queryset's values, or a dict)."""
        return cls(Tally.of({k: counts.get(k) or 0 for k in OUTCOME_KEYS}), policy)

    @property
    def passed(self) -> int:
        return self.tally.passed

    @property
    def failed(self) -> int:
        return self.tally.failed

    @property
    def refused(self) -> int:
        return self.tally.refused

    @property
    def unparseable(self) -> int:
        return self.tally.unparseable

    @property
    def error(self) -> int:
        return self.tally.error

    @property
    def verdicts(self) -> int:
        return self.tally.tests

    @property
    def decided(self) -> int:
        """The pass rate's denominator under the policy (LangBiTe's Total by default)."""
        return self.tally.successes_and_total(self.policy)[1]

    @property
    def pass_rate(self) -> float | None:
        return self.tally.pass_rate(self.policy)

    @property
    def interval(self) -> tuple[float, float] | None:
        return self.tally.interval(self.policy)

    @property
    def refusal_rate(self) -> float | None:
        return self.tally.refusal_rate

    @property
    def error_rate(self) -> float | None:
        """Errors and unparseable answers: the test could not be decided."""
        return self.tally.error_rate

    def as_dict(self) -> dict[str, Any]:
        interval = self.interval
        return {
            **{k: getattr(self.tally, k) for k in OUTCOME_KEYS},
            "verdicts": self.verdicts,
            "n": self.decided,
            "pass_rate": rounded(self.pass_rate),
            "ci_low": rounded(interval[0]) if interval else None,
            "ci_high": rounded(interval[1]) if interval else None,
            "refusal_rate": rounded(self.refusal_rate),
            "error_rate": rounded(self.error_rate),
            "refusal_policy": self.policy,
        }


def rounded(value: float | None, digits: int = 4) -> float | None:
    return round(value, digits) if value is not None else None


T = TypeVar("T")


@dataclass
class Ranked(Generic[T]):
    subject: T
    reading: Reading
    standing: Standing | None = None  # None: nothing decided, so no rank
    shared: bool = False  # another subject holds the same rank
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        return self.standing.rank if self.standing else None

    @property
    def rank_low(self) -> int | None:
        return self.standing.rank_low if self.standing else None

    @property
    def rank_high(self) -> int | None:
        return self.standing.rank_high if self.standing else None

    @property
    def rank_range(self) -> str:
        return self.standing.rank_label if self.standing else ""

    @property
    def label(self) -> str:
        """The shared rank, with the range the intervals allow when it is wider: "1 (1-2)"."""
        if self.standing is None:
            return "\u2013"
        if self.standing.rank_low == self.standing.rank_high:
            return str(self.standing.rank)
        return f"{self.standing.rank} ({self.standing.rank_label})"


def rank(items: Iterable[tuple[T, Reading]], policy: str = DEFAULT_POLICY) -> list[Ranked[T]]:
    """Best pass rate first, ranked by the engine; subjects with nothing decided get no rank."""
    subjects = list(items)
    # Zero-padded positions as the engine's names: its tie-break by name keeps the input order.
    by_name = {f"{i:08d}": pair for i, pair in enumerate(subjects)}
    standings = engine_rank({name: reading.tally for name, (_, reading) in by_name.items()}, policy)
    ranked = []
    for standing in standings:
        subject, reading = by_name[standing.name]
        ranked.append(Ranked(subject, reading, standing if standing.interval is not None else None))
    counts: dict[int, int] = {}
    for item in ranked:
        if item.rank is not None:
            counts[item.rank] = counts.get(item.rank, 0) + 1
    for item in ranked:
        item.shared = item.rank is not None and counts[item.rank] > 1
    return ranked


def _flip_key(r: Ranked[Any]) -> Any:
    rate = r.extra.get("flip_rate")
    return (rate is None, -(rate or 0))


SORTS: dict[str, Callable[[Ranked[Any]], Any]] = {
    "rank": lambda r: (r.rank is None, r.rank or 0, -(r.reading.pass_rate or 0)),
    "pass_rate": lambda r: (r.reading.pass_rate is None, -(r.reading.pass_rate or 0)),
    "n": lambda r: -r.reading.decided,
    "refusal_rate": lambda r: (r.reading.refusal_rate is None, -(r.reading.refusal_rate or 0)),
    "error_rate": lambda r: (r.reading.error_rate is None, -(r.reading.error_rate or 0)),
    "language_gap": lambda r: (r.extra.get("language_gap") is None, -(r.extra.get("language_gap") or (0,))[0]),
    "flip_rate": _flip_key,
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
