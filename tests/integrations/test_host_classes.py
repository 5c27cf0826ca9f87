"""The package changes no class of Celery's or Django's: only the tasks that ask are changed.

Each case runs in a fresh interpreter, which notes the attributes of Celery's ``Task`` and of
``django.tasks``' ``Task`` (or the backport's) before anything of this package is imported,
then imports all of it, defines tasks of every kind (with and without ``@single_instance``, with
and without ``enqueue=``, with and without the package's task classes), finalizes the Celery
app, enqueues, and compares: every attribute is the very object it was.
"""

from __future__ import annotations

import json
import textwrap

from tests.support.helpers import python_without_settings

_SCRIPT = """
import json, os, sys
from importlib.util import find_spec
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"

import celery.app.task
if find_spec("django.tasks") is not None:
    import django.tasks.base as tasks_base
else:
    import django_tasks.base as tasks_base
assert not any(name.startswith("django_redis_lock") for name in sys.modules)
# django-tasks and django-tasks-db run django_stubs_ext.monkeypatch() when imported, which
# gives Django's own Task a __class_getitem__: their doing, done before the snapshot.
for name in ("django_tasks", "django_tasks_db"):
    if find_spec(name) is not None:
        __import__(name)
classes = {"celery": celery.app.task.Task, "django.tasks": tasks_base.Task}
before = {label: dict(vars(cls)) for label, cls in classes.items()}

import django
django.setup()
from celery import Celery, shared_task
import django_redis_lock
from django_redis_lock.celery import SingleInstanceTask, single_instance
from django_redis_lock.tasks import SingleInstanceTask as SingleInstanceDjangoTask
from django_redis_lock.tasks import single_instance as single_task_instance
if find_spec("django.tasks") is not None:
    from django.tasks import task
else:
    from django_tasks import task

def bare(n): return n
def locked(n): return n
def skipping(n): return n
def shared(self): return 1

app = Celery("identity", set_as_current=False)
app.conf.task_always_eager = True
app.task(name="bare")(bare)
app.task(name="locked")(single_instance("{n}", using="locmem")(locked))
skips = single_instance("{n}", enqueue="skip", using="locmem")
app.task(name="skipping", base=SingleInstanceTask)(skips(skipping))
shared_task(name="shared", bind=True)(single_instance(enqueue="raise")(shared))
app.finalize()
assert [app.tasks[name].delay(1).get() for name in ("bare", "locked", "skipping")] == [1, 1, 1]
plain = [app.tasks[name] for name in ("bare", "locked", "shared")]

# Each Task is bound to its function's name, as @task does: Django 6.1's DummyBackend copies a
# result's task by its import path.
def counted(n): return n
def claimed(n): return n
def claimed_here(n): return n
counted_task = counted = task(backend="plain")(single_task_instance("{n}")(counted))
claimed_task = claimed = task(backend="plain")(
    single_task_instance("{n}", enqueue="raise")(claimed)
)
claimed_here = task(backend="dummy")(single_task_instance("{n}", enqueue="raise")(claimed_here))
counted_task.enqueue(1)
claimed_task.using(priority=0).enqueue(2)

after = {label: dict(vars(cls)) for label, cls in classes.items()}
print(json.dumps({
    "changed": {
        label: sorted(
            name for name in before[label].keys() | after[label].keys()
            if before[label].get(name) is not after[label].get(name)
        )
        for label in classes
    },
    "celery_tasks_own_attributes": sorted(
        {name for t in plain for name in vars(t)} & {"apply_async", "delay", "run"}
    ),
    "celery_tasks_classes_send_as_celery": all(
        type(t).apply_async is celery.app.task.Task.apply_async for t in plain
    ),
    "django_task_classes": [
        type(t).__name__ for t in (counted_task, claimed_task, claimed_here)
    ],
    "django_task_is_djangos": type(claimed_task) is tasks_base.Task,
    "package_classes_are_subclasses": [
        issubclass(SingleInstanceTask, celery.app.task.Task),
        issubclass(SingleInstanceDjangoTask, tasks_base.Task),
    ],
}))
"""


def test_no_class_of_celery_or_django_is_changed__by_tasks_with_or_without_enqueue() -> None:
    done = python_without_settings(textwrap.dedent(_SCRIPT))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["changed"] == {"celery": [], "django.tasks": []}, "same objects, none added"
    assert result["celery_tasks_own_attributes"] == []
    assert result["celery_tasks_classes_send_as_celery"] is True
    assert result["django_task_classes"] == ["Task", "Task", "SingleInstanceTask"]
    assert result["django_task_is_djangos"] is True
    assert result["package_classes_are_subclasses"] == [True, True]
