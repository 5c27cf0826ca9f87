"""Root conftest: loads the pytest plugins after coverage has started."""

pytest_plugins = [
    "django_redis_lock.testing.pytest_plugin",
    # Under xdist: each module's tests on one worker, the tests marked serial alone.
    "tests.support.scheduling",
]
