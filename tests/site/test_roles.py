"""Who reaches which back-office page: a visitor, a curator and an admin against every admin
changelist, add and change page, the template preview and the RQ dashboard."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from leaderboard.models import (
    LLM,
    Community,
    Concern,
    JudgeCheck,
    Language,
    LibraryImport,
    Response,
    Run,
    RunPrompt,
    Template,
    TemplateVersion,
    Verdict,
)
from tests.site.conftest import needs_redis

pytestmark = pytest.mark.django_db

LIBRARY_MODELS = {"language", "concern", "community", "template", "templateversion"}
READ_ONLY = {"run", "runprompt", "response", "verdict", "libraryimport", "templateversion", "judgecheck"}
CURATOR_CANNOT_ADD = {"language", "templateversion"}


@pytest.fixture
def objects(finished_runs: dict[str, Run]) -> dict[str, Any]:
    prompt = RunPrompt.objects.first()
    return {
        "llm": LLM.objects.first(),
        "run": finished_runs["good-model"],
        "runprompt": prompt,
        "response": Response.objects.get(prompt=prompt),
        "verdict": Verdict.objects.first(),
        "libraryimport": LibraryImport.objects.first(),
        "language": Language.objects.first(),
        "concern": Concern.objects.first(),
        "community": Community.objects.first(),
        "template": Template.objects.first(),
        "templateversion": TemplateVersion.objects.first(),
        "judgecheck": JudgeCheck.objects.create(judge="judge", language="all", items=2, agreed=1, accuracy=0.5),
    }


def admin_urls(objects: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(model, kind, url) for every leaderboard admin page."""
    urls = []
    for model, obj in objects.items():
        base = f"/admin/leaderboard/{model}/"
        urls += [
            (model, "changelist", base),
            (model, "add", f"{base}add/"),
            (model, "change", f"{base}{obj.pk}/change/"),
        ]
    urls.append(("template", "preview", f"/admin/leaderboard/template/{objects['template'].pk}/preview/"))
    return urls


RQ_URLS = [
    "/admin/django_rq/dashboard/",
    "/django-rq/",
    "/django-rq/queues/0/",
    "/django-rq/workers/0/",
    "/django-rq/stats.json",
]


def test_it_sends_visitors_to_the_login_page(client: Client, objects: dict[str, Any]) -> None:
    for _, _, url in admin_urls(objects):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    for url in RQ_URLS:
        response = client.get(url)
        assert response.status_code in (302, 401), url
        if response.status_code == 302:
            assert "/login/" in response["Location"], url


def test_it_lets_curators_edit_the_library_only(client: Client, curator: Any, objects: dict[str, Any]) -> None:
    client.force_login(curator)
    for model, kind, url in admin_urls(objects):
        allowed = model in LIBRARY_MODELS and not (kind == "add" and model in CURATOR_CANNOT_ADD)
        status = client.get(url).status_code
        assert status == (200 if allowed else 403), f"{url}: {status}"
    index = client.get("/admin/").content.decode()
    assert "Templates" in index and "LLMs" not in index and "Runs" not in index and "Django-RQ" not in index
    for url in RQ_URLS:
        assert client.get(url).status_code == 403, url
    # And no write either: an LLM cannot be created by posting to its add page.
    before = LLM.objects.count()
    client.post("/admin/leaderboard/llm/add/", {"slug": "x", "name": "x", "provider": "openai", "model_id": "m"})
    assert LLM.objects.count() == before


def test_it_gives_admins_everything_but_editing_results(
    client: Client, superuser: Any, objects: dict[str, Any]
) -> None:
    client.force_login(superuser)
    for model, kind, url in admin_urls(objects):
        expected = 403 if kind == "add" and model in READ_ONLY else 200
        assert client.get(url).status_code == expected, url
    for url in ("/admin/auth/user/", "/admin/auth/group/"):
        assert client.get(url).status_code == 200


@needs_redis
def test_it_shows_the_rq_dashboard_to_superusers(client: Client, superuser: Any, redis_queue: Any) -> None:
    client.force_login(superuser)
    for url in RQ_URLS:
        assert client.get(url).status_code == 200, url


def test_it_keeps_the_rq_dashboard_from_staff_who_are_not_superusers(client: Client, django_user_model: Any) -> None:
    staff = django_user_model.objects.create_user("staff", password="staff-pass-123", is_staff=True)
    client.force_login(staff)
    for url in RQ_URLS:
        assert client.get(url).status_code == 403, url
