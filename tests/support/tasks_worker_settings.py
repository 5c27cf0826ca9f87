"""Settings of the processes that the django-tasks-db worker tests start (workers, client).

The test suite's settings, with the database in the SQLite file named by ``DRL_TASKS_DB``,
the task aliases "default" and "db" on django-tasks-db, and ``LOCKS`` on the test session's
throw-away redis-server (``DRL_TASKS_REDIS_URL``) under the key prefix ``DRL_TASKS_PREFIX``.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import TASKS

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["DRL_TASKS_DB"],
        # Two workers and a client share the file: wait for its lock, never fail at once.
        "OPTIONS": {"timeout": 30},
    }
}
TASKS = {
    **TASKS,
    "default": {"BACKEND": "tests.support.task_backends.DatabaseBackend"},
    "db": {"BACKEND": "tests.support.task_backends.DatabaseBackend"},
}
LOCKS = {
    "default": {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {
            "url": os.environ["DRL_TASKS_REDIS_URL"],
            "key_prefix": os.environ["DRL_TASKS_PREFIX"],
        },
    }
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django_redis_lock": {"handlers": ["stderr"], "level": "INFO"}},
}
