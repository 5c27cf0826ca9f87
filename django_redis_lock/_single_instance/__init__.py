"""What ``@single_instance`` means, written once for every task queue it decorates.

:mod:`django_redis_lock.celery` and :mod:`django_redis_lock.tasks` (Django's ``django.tasks``)
differ only in how they see a run start, end and be sent. The rest is here, private to the
package: the decorator's settings and their checks (:mod:`.config`), the lock name built from
a run's arguments (:mod:`.lock_names`), what a run does when it finds its lock held
(:mod:`.refusal`), and the claim that refuses a duplicate when it is sent, ``enqueue=``
(:mod:`.enqueue_claim`). A task's ``@rate_limit`` is written once here too (:mod:`.run_rate`),
with the same key vocabulary.

Nothing here is imported by this ``__init__``: each task queue takes only what it uses.
"""
