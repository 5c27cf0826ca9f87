"""URLs of the admin tests: the default admin site and a second one, ``ops_site``.

``ops_site`` is an AdminSite of its own (another name, another URL) with only the Locks page,
to show that the page does not depend on ``admin.site``.
"""

from django.contrib import admin
from django.urls import path

from django_redis_lock.admin import LockAdmin
from django_redis_lock.models import Lock

ops_site = admin.AdminSite(name="ops")
ops_site.register(Lock, LockAdmin)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/", ops_site.urls),
]
