"""The example project; its Celery app is loaded with it, so ``@shared_task`` finds it."""

from importlib.util import find_spec

# Celery is optional: without it, every command but the demo's third part still works.
if find_spec("celery") is not None:
    from .celery import app as celery_app

    __all__ = ["celery_app"]
