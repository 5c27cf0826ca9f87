"""URLs of the example project: the admin, whose Locks page lists held locks, the shop's
locked views (``shop/views.py``), and the health checks of django-health-check."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path
from health_check.views import HealthCheckView
from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/<int:order_id>/pay/", views.pay, name="pay"),
    path(
        "catalogs/<slug:supplier>/import/",
        views.CatalogImportView.as_view(),
        name="catalog-import",
    ),
    # Red when Redis does not answer, or this process's lock renewal falls behind.
    path(
        "health/",
        HealthCheckView.as_view(
            checks=[
                ("django_redis_lock.contrib.health_check.LockBackend", {"alias": "default"}),
                "django_redis_lock.contrib.health_check.LockRenewal",
            ]
        ),
        name="health",
    ),
]
# The admin's styles and the Locks page's script, served by Django itself in DEBUG only.
urlpatterns += staticfiles_urlpatterns()
