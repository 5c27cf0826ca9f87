"""Settings of the example project: a shop whose invoices are locked with django-redis-lock.

Redis is found through the ``REDIS_URL`` environment variable: it holds the locks and is
Celery's broker and result backend. ``manage.py demo`` starts a throw-away server of its own
when it is unset.
"""

import os
from importlib.util import find_spec
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# Fine for a demo on your machine; never deploy with this key.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_redis_lock",
    "health_check",
    # The locks' Prometheus metrics (the prometheus extra), served at /metrics.
    "django_redis_lock.contrib.prometheus",
    "shop",
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

ROOT_URLCONF = "example.urls"
WSGI_APPLICATION = "example.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# Only the admin uses the database; `manage.py demo` needs no migrations.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "db.sqlite3",
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
STATIC_URL = "static/"

REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"

LOCKS = {
    "default": {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {
            "url": REDIS_URL,
            "key_prefix": "example",
        },
    },
}

# Celery (example/celery.py): the same Redis is the broker and keeps the results. Nothing
# connects to it until a task is sent or a worker starts.
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Django's task framework (shop/jobs.py): django.tasks on Django 6.0+, else the django-tasks
# backport (the example extra installs it), which is then an installed app. ImmediateBackend
# runs a task at once, inside enqueue(), so the demo needs no worker; a project names a worker
# backend here, such as django-tasks-db's "django_tasks_db.DatabaseBackend".
if find_spec("django.tasks") is not None:
    TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
elif find_spec("django_tasks") is not None:
    INSTALLED_APPS.append("django_tasks")
    TASKS = {"default": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"}}
