"""URLs of the example project: the admin, whose Locks page lists held locks."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
# The admin's styles and the Locks page's script, served by Django itself in DEBUG only.
urlpatterns += staticfiles_urlpatterns()
