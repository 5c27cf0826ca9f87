"""URLs of the example project: the admin, where held locks will be listed."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
