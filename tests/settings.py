"""Django settings of the test suite. LOCKS is pointed at a throw-away server by conftest."""

from importlib.util import find_spec

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_redis_lock",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
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
ROOT_URLCONF = "tests.urls"
# The session's throw-away server replaces this URL (see conftest.py); nothing here ever
# connects to a Redis on the default port.
LOCKS = {
    "default": {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {"url": "redis://127.0.0.1:1/0"},
    },
    "locmem": {"BACKEND": "django_redis_lock.backends.locmem.LocMemBackend"},
}

# Django's task framework: django.tasks on Django 6.0+, the django-tasks backport on 5.2. The
# test tasks (tests/support/tasks.py) run at once by default; django-tasks-db's worker tests
# point "db" at their own SQLite file (see tests/support/tasks_worker_settings.py).
_TASKS = "django.tasks" if find_spec("django.tasks") else "django_tasks"
if _TASKS == "django_tasks":
    INSTALLED_APPS.append("django_tasks")
INSTALLED_APPS.append("django_tasks_db")
# Each backend supplies SingleInstanceTask (tests/support/task_backends.py), as a project using
# enqueue= does; "plain" is Django's own, with Django's Task.
TASKS = {
    "default": {"BACKEND": "tests.support.task_backends.ImmediateBackend"},
    "dummy": {"BACKEND": "tests.support.task_backends.DummyBackend"},
    "db": {"BACKEND": "tests.support.task_backends.DatabaseBackend"},
    "plain": {"BACKEND": f"{_TASKS}.backends.dummy.DummyBackend"},
}
