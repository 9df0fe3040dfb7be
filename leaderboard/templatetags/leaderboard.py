"""Formatting for the public pages: rates, intervals and outcome labels that never rely on colour."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

# Every outcome has an icon and a word, so it reads without colour and in a screen reader.
OUTCOME_LABELS = {
    "passed": ("\u2714", "passed"),
    "failed": ("\u2718", "failed"),
    "refused": ("\u2298", "refused"),
    "unparseable": ("?", "unparseable"),
    "error": ("!", "error"),
    "": ("\u2026", "not evaluated"),
}
STATUS_LABELS = {
    "queued": ("\u23f3", "queued"),
    "running": ("\u25b6", "running"),
    "evaluating": ("\u2696", "evaluating"),
    "done": ("\u2714", "done"),
    "failed": ("\u2718", "failed"),
}


@register.filter
def pct(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "\u2013"
    return f"{value * 100:.{int(digits)}f}%"


@register.filter
def interval(tally: Any) -> str:
    ci = getattr(tally, "interval", None)
    if not ci:
        return "\u2013"
    return f"{ci[0] * 100:.0f}\u2013{ci[1] * 100:.0f}%"


@register.simple_tag
def outcome_badge(outcome: str | None) -> SafeString:
    icon, label = OUTCOME_LABELS.get(outcome or "", ("\u2022", str(outcome)))
    return format_html(
        '<span class="badge outcome-{}"><span aria-hidden="true">{}</span> {}</span>', outcome or "none", icon, label
    )


@register.simple_tag
def status_badge(status: str) -> SafeString:
    icon, label = STATUS_LABELS.get(status, ("\u2022", status))
    return format_html(
        '<span class="badge status-{}"><span aria-hidden="true">{}</span> {}</span>', status, icon, label
    )


@register.simple_tag
def rank_label(row: Any) -> SafeString:
    """The shared rank with the range its interval allows ("1 (1-2)"), and the word "shared"
    when another model holds the same rank."""
    if row is None or row.rank is None:
        return format_html("{}", "\u2013")
    if row.shared:
        return format_html('{} <small class="shared">shared</small>', row.label)
    return format_html("{}", row.label)


@register.filter
def num(value: float | None, digits: int = 2) -> str:
    """A metric to a few decimals, or a dash when there is none."""
    if value is None:
        return "\u2013"
    return f"{value:.{int(digits)}f}"


AGREEMENT_LABEL = "judge agreement with human labels"


@register.simple_tag
def judge_agreement(judge: Any) -> SafeString:
    """How far a judge's verdicts can be trusted, next to results it produced: its latest
    agreement with the human labels, or how to measure it."""
    from leaderboard.models import JudgeCheck

    spec = getattr(judge, "judge", judge)
    check = getattr(judge, "check", None) if not isinstance(judge, str) else JudgeCheck.objects.latest_for(judge)
    if check is None:
        return format_html(
            '<span class="judge-agreement">{}: not measured (run <code>{}</code>)</span>',
            AGREEMENT_LABEL,
            JudgeCheck.command(spec),
        )
    return format_html('<span class="judge-agreement">{}: {}</span>', AGREEMENT_LABEL, check.summary)


@register.simple_tag
def bar(value: float | None) -> SafeString:
    """A small bar with the number next to it (the number carries the meaning, the bar helps scan)."""
    if value is None:
        return format_html('<span class="meter empty">{}</span>', "\u2013")
    width = max(0.0, min(100.0, value * 100))
    return format_html(
        '<span class="meter"><span class="meter-fill" style="width: {}%"></span></span> <span class="num">{}</span>',
        f"{width:.0f}",
        pct(value),
    )


@register.filter
def duration(value: Any) -> str:
    """A timedelta as people say it: "25 s", "3 min 5 s", "2 h 4 min"."""
    if value is None:
        return "\u2013"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.filter
def as_json(value: Any) -> str:
    """Compact JSON text (escaped by the template like any other text)."""
    return json.dumps(value, ensure_ascii=False)


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None
