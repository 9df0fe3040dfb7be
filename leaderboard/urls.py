from django.contrib import admin
from django.urls import include, path
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns

from leaderboard import api, views
from leaderboard.admin import guard_patterns

api_patterns = [
    path("", api.index, name="index"),
    path("leaderboard/", api.leaderboard, name="leaderboard"),
    path("models/", api.models, name="models"),
    path("models/<slug:slug>/", api.model, name="model"),
    path("runs/", api.runs, name="runs"),
    path("runs/<int:pk>/", api.run, name="run"),
    path("responses/", api.responses, name="responses"),
    path("judges/", api.judges, name="judges"),
]

# django-rq admits any staff user (curators included); every one of its views is wrapped so
# that only superusers get in.
rq_patterns = guard_patterns(get_api_urlpatterns() + get_admin_urlpatterns())

urlpatterns = [
    path("", views.leaderboard, name="leaderboard"),
    path("models/", views.model_list, name="models"),
    path("models/<slug:slug>/", views.model_detail, name="model"),
    path("runs/", views.run_list, name="runs"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("runs/<int:pk>/progress.json", views.run_progress, name="run_progress"),
    path("runs/<int:pk>/reports/<str:name>", views.run_report, name="run_report"),
    path("responses/", views.response_list, name="responses"),
    path("responses/<int:pk>/", views.response_detail, name="response"),
    path("concerns/", views.concern_list, name="concerns"),
    path("concerns/<slug:code>/", views.concern_detail, name="concern"),
    path("templates/<int:pk>/", views.template_detail, name="template"),
    path("compare/", views.compare, name="compare"),
    path("methodology/", views.methodology, name="methodology"),
    path("api/v1/", include((api_patterns, "api"))),
    path("admin/", admin.site.urls),
    path("django-rq/", include((rq_patterns, "django_rq"))),
]
