"""Who may do what in the back office."""

from __future__ import annotations

from typing import Any

CURATORS = "Curators"
# model -> permitted actions; everything else (LLMs, runs, prompts, responses, verdicts, library
# imports, the job queue) stays out of curators' reach.
CURATOR_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "concern": ("add", "change", "view"),
    "concerntext": ("add", "change", "delete", "view"),
    "community": ("add", "change", "delete", "view"),
    "template": ("add", "change", "view"),
    "templateversion": ("view",),
    "language": ("change", "view"),
}


def curator_codenames() -> list[str]:
    return [f"{action}_{model}" for model, actions in CURATOR_PERMISSIONS.items() for action in actions]


def ensure_curators_group(group_model: Any = None, permission_model: Any = None) -> Any:
    """The Curators group with exactly its permissions (used by the data migration, and after a
    test database flush)."""
    if group_model is None or permission_model is None:
        from django.contrib.auth.models import Group, Permission

        group_model, permission_model = Group, Permission
    group, _ = group_model.objects.get_or_create(name=CURATORS)
    permissions = permission_model.objects.filter(
        content_type__app_label="leaderboard", codename__in=curator_codenames()
    )
    group.permissions.set(permissions)
    return group
