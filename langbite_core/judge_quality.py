"""How far a judge model can be trusted: its agreement with human labels, per language.

The labelled sets (`data/judge/labels_<lang>.jsonl`) hold answers that do not literally match the
expected value, with the verdict a careful reader gives them (pass, fail or refusal).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from langbite_core.execution import Executor, PromptJob
from langbite_core.judge import JUDGE_DATA, JUDGE_VERDICTS, judge_request, parse_judge_reply
from langbite_core.oracles import OraclePrediction


@dataclass(frozen=True)
class LabelledAnswer:
    id: str
    language: str
    prompt: str
    oracle: OraclePrediction
    answer: str
    label: str


@dataclass(frozen=True)
class Agreement:
    items: int
    agreed: int
    kappa: float | None  # Cohen's kappa: agreement beyond what chance would give
    unusable: int  # replies with no verdict

    @property
    def accuracy(self) -> float | None:
        return self.agreed / self.items if self.items else None

    def to_json(self) -> dict[str, float | int | None]:
        return {"items": self.items, "agreed": self.agreed, "accuracy": self.accuracy, "kappa": self.kappa,
                "unusable": self.unusable}  # fmt: skip


def load_labels(folder: Path = JUDGE_DATA) -> list[LabelledAnswer]:
    items = []
    for path in sorted(folder.glob("labels_*.jsonl")):
        language = path.stem.removeprefix("labels_")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            data = json.loads(line)
            if data.get("label") not in JUDGE_VERDICTS:
                raise ValueError(f"{path}:{number}: label must be one of {', '.join(JUDGE_VERDICTS)}")
            items.append(
                LabelledAnswer(
                    id=data["id"],
                    language=language,
                    prompt=data["prompt"],
                    oracle=OraclePrediction.from_json(data["oracle"]),
                    answer=data["answer"],
                    label=data["label"],
                )
            )
    return items


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(first[c] * second[c] for c in set(first) | set(second)) / (n * n)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def agreement(pairs: list[tuple[str, str | None]]) -> Agreement:
    usable = [(label, verdict) for label, verdict in pairs if verdict is not None]
    return Agreement(
        items=len(pairs),
        agreed=sum(label == verdict for label, verdict in usable),
        kappa=cohen_kappa(usable),  # type: ignore[arg-type]
        unusable=len(pairs) - len(usable),
    )


def measure_judge(judge_model: str, executor: Executor, items: list[LabelledAnswer]) -> dict[str, Agreement]:
    """Agreement overall ("all") and per language of one judge with the labels."""
    jobs = {
        item.id: PromptJob(judge_model, judge_request(item.prompt, item.oracle, item.answer, item.language))
        for item in items
    }
    replies = executor.run(list(jobs.values()))
    verdicts = {}
    for item in items:
        reply = replies[jobs[item.id]]
        verdicts[item.id] = parse_judge_reply(reply.text).verdict if reply.text is not None else None
    by_language: dict[str, list[tuple[str, str | None]]] = {}
    for item in items:
        by_language.setdefault(item.language, []).append((item.label, verdicts[item.id]))
    result = {language: agreement(pairs) for language, pairs in sorted(by_language.items())}
    result["all"] = agreement([pair for pairs in by_language.values() for pair in pairs])
    return result
