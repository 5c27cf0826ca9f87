"""URLs of the example project: the admin, whose Locks page lists held locks, the shop's
locked views (``shop/views.py``), the health checks of django-health-check, and the locks'
Prometheus metrics at ``/metrics``."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path
from health_check.views import HealthCheckView
from shop import views

from django_redis_lock.contrib.prometheus.views import metrics

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
    # Open here for the demo; in production, serve it where only Prometheus can reach it.
    path("metrics", metrics, name="metrics"),
]
# The admin's styles and the Locks page's script, served by Django itself in DEBUG only.
urlpatterns += staticfiles_urlpatterns()
