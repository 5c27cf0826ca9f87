"""The ``Lock`` model: no table, only the permissions of the admin's Locks page.

Held locks live in Redis, not in the database. The model exists so that Django's permission
system (groups, ``user.has_perm``) and the admin index can refer to them: ``view_lock`` shows
the page, ``release_lock`` lets a user force-release a lock from it.
"""

from __future__ import annotations

from django.db import models

__all__ = ["Lock"]


class Lock(models.Model):
    """A held lock, as the admin names it; never stored."""

    name = models.CharField(max_length=1024, primary_key=True)

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = (("release_lock", "Can force-release locks"),)
        verbose_name = "lock"
        verbose_name_plural = "locks"

    def __str__(self) -> str:
        return self.name
