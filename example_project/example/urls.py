"""URLs of the example project: the admin, whose Locks page lists held locks, and the shop's
locked views (``shop/views.py``)."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path
from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/<int:order_id>/pay/", views.pay, name="pay"),
    path(
        "catalogs/<slug:supplier>/import/",
        views.CatalogImportView.as_view(),
        name="catalog-import",
    ),
]
# The admin's styles and the Locks page's script, served by Django itself in DEBUG only.
urlpatterns += staticfiles_urlpatterns()
