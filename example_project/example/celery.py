"""The Celery app of the example project: ``celery -A example worker`` from example_project/.

Its settings are the ``CELERY_*`` names in ``example/settings.py``; the broker and the result
backend are the Redis of ``REDIS_URL``, the one the locks use. Tasks are found in the
``tasks.py`` of each installed app (``shop/tasks.py``).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example.settings")

app = Celery("example")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
