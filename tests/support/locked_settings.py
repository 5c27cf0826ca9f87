"""Settings of the processes that the ``manage.py locked`` tests start.

The test suite's settings, with an app of test commands (``tests.commands_app``), the
database in the SQLite file ``DRL_LOCKED_DB`` (for ``migrate``), and ``LOCKS`` on the test
session's throw-away redis-server (``DRL_LOCKED_URL``) under the prefix ``DRL_LOCKED_PREFIX``.
"""

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.commands_app"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DRL_LOCKED_DB", ":memory:"),
        "OPTIONS": {"timeout": 30},
    }
}
LOCKS = {
    "default": {
        "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
        "OPTIONS": {
            "url": os.environ["DRL_LOCKED_URL"],
            "key_prefix": os.environ["DRL_LOCKED_PREFIX"],
        },
    }
}
