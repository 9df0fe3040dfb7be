"""Settings for the leaderboard site.

Zero-setup defaults (SQLite, jobs run inline) so a checkout runs as it is; production chooses
PostgreSQL and Redis through the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return value in ("true", "1", "yes")


def envint(name: str, default: str) -> int:
    value = os.environ.get(name, default)
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {value!r}") from None


def envsecret(name: str, default: str) -> str:
    """A secret from NAME, or from the file that NAME_FILE points to."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


DEBUG = envbool("DEBUG", "true")
SECRET_KEY = envsecret("SECRET_KEY", "dev-only-not-secret" if DEBUG else "")
if not SECRET_KEY:
    raise ValueError("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is false")
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_rq",
    "leaderboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

if not DEBUG:
    # Serves the collected static files (CSS, the local plotly.js) under gunicorn; with DEBUG on,
    # runserver serves them from the source folders instead.
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "leaderboard.urls"
WSGI_APPLICATION = "leaderboard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

VAR_DIR = Path(os.environ.get("LANGBITE_VAR_DIR", BASE_DIR / "var"))

if os.environ.get("DB", "sqlite") == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("DB_NAME", "langbite"),
            "USER": os.environ.get("DB_USER", "postgres"),
            "PASSWORD": envsecret("DB_PASSWORD", ""),
            "HOST": os.environ.get("DB_HOST", "127.0.0.1"),
            "PORT": os.environ.get("DB_PORT", "5432"),
            "CONN_MAX_AGE": envint("DB_CONN_MAX_AGE", "0"),
        }
    }
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("DB_NAME", str(VAR_DIR / "db.sqlite3")),
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Background jobs: with REDIS_URL, runs go to RQ workers; without it they run inline.
REDIS_URL = os.environ.get("REDIS_URL", "")
RQ_QUEUES = {
    "default": {"URL": REDIS_URL or "redis://127.0.0.1:6379/0", "DEFAULT_TIMEOUT": 3600},
}
# The dashboard is linked from the admin for superusers only (leaderboard/admin.py).
RQ_SHOW_ADMIN_LINK = True
RQ_QUEUE_NAME = "default"

# Runs: prompts per RQ job, and how long a run may go without a heartbeat before the scheduler
# assumes its worker died and enqueues the unfinished work again. The limit must exceed the
# slowest single model call (timeout times retries), or a slow but live worker gets a twin.
LEADERBOARD_CHUNK_SIZE = envint("LEADERBOARD_CHUNK_SIZE", "50")
LEADERBOARD_STALE_AFTER_S = envint("LEADERBOARD_STALE_AFTER_S", "600")
LEADERBOARD_MAX_RECOVERIES = envint("LEADERBOARD_MAX_RECOVERIES", "5")
LEADERBOARD_SCHEDULER_INTERVAL_S = envint("LEADERBOARD_SCHEDULER_INTERVAL_S", "30")
# Cosine similarity of paired answers needs the optional embeddings model; off unless asked.
LEADERBOARD_EMBEDDINGS = envbool("LEADERBOARD_EMBEDDINGS", "false")
# The judge model (a registered model's slug or provider:model) for runs whose requirements name
# none; blank: the engine's choice among the installed bundled judges.
LEADERBOARD_JUDGE = os.environ.get("LEADERBOARD_JUDGE", "").strip()

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# plotly.min.js is served from the installed plotly package (never from a CDN).
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "leaderboard.finders.PlotlyFinder",
]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))

LOGIN_URL = "admin:login"
