"""System checks of the LOCKS setting: every id, asserted with its exact message and hint."""

from __future__ import annotations

import io
import math
import re
import textwrap
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import ERROR, CheckMessage, Error, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.utils.module_loading import import_string

from django_redis_lock import InvalidLockBackendError, locks
from django_redis_lock.backends.redis import RedisBackend
from tests.support.helpers import python_without_settings, without_locks_setting

REDIS = "django_redis_lock.backends.redis.RedisBackend"
LOCMEM = "django_redis_lock.backends.locmem.LocMemBackend"
REDLOCK = "django_redis_lock.backends.redlock.RedlockBackend"
CLUSTER = "django_redis_lock.backends.cluster.RedisClusterBackend"
#: Nothing listens on port 1: a check that connected there would fail.
DOWN_URL = "redis://127.0.0.1:1/0"
SECRET = "s3cret"

HINT_E001 = (
    'Set LOCKS = {"default": {"BACKEND": "django_redis_lock.backends.redis.RedisBackend", '
    '"OPTIONS": {"url": "redis://..."}}}.'
)
HINT_E002 = "Add a 'default' entry: lock() uses it when no alias is given."
HINT_E003 = 'Use {"BACKEND": "django_redis_lock.backends.redis.RedisBackend"}.'
HINT_E004 = (
    "Check the dotted path; the built-in backends are "
    "django_redis_lock.backends.redis.RedisBackend, "
    "django_redis_lock.backends.cluster.RedisClusterBackend, "
    "django_redis_lock.backends.redlock.RedlockBackend and "
    "django_redis_lock.backends.locmem.LocMemBackend."
)
HINT_E005 = "A backend must subclass django_redis_lock.backends.base.BaseLockBackend."
HINT_E006 = "OPTIONS holds the keyword arguments of the backend's constructor."
HINT_E008 = "Use one of: redis://, rediss://, unix://, valkey://, valkeys://."
HINT_E009 = "Durations are seconds; floats give millisecond precision (0.5 is 500 ms)."
HINT_E010 = (
    "Every key of a lock starts with the prefix; braces would break the Redis Cluster hash "
    "tag. The default is 'lock'."
)
HINT_E011 = "Check the URL, the credentials, the network and the server; lock() would fail too."


def redis_alias(url: str = DOWN_URL, **options: Any) -> dict[str, Any]:
    """Return one LOCKS entry for a RedisBackend at ``url``."""
    return {"BACKEND": REDIS, "OPTIONS": {"url": url, **options}}


def lock_checks(*, deploy: bool = False) -> list[CheckMessage]:
    """Run every registered check; return the messages of this package only."""
    return [
        message
        for message in run_checks(include_deployment_checks=deploy)
        if (message.id or "").startswith("django_redis_lock.")
    ]


# E001 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "type_name"),
    [(["default"], "list"), ("redis://127.0.0.1:6379/0", "str"), (None, "NoneType")],
)
def test_check__locks_not_a_dict__E001(value: object, type_name: str) -> None:
    with override_settings(LOCKS=value):
        assert lock_checks() == [
            Error(
                f"LOCKS must be a dict of aliases, got {type_name}.",
                hint=HINT_E001,
                id="django_redis_lock.E001",
            )
        ]


# E002 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [{}, {"other": {"BACKEND": LOCMEM}}])
def test_check__no_default_alias__E002(value: dict[str, Any]) -> None:
    with override_settings(LOCKS=value):
        assert lock_checks() == [
            Error("LOCKS has no 'default' alias.", hint=HINT_E002, id="django_redis_lock.E002")
        ]


# E003 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        LOCMEM,  # the import string alone, without the dict around it
        None,
        {"OPTIONS": {"key_prefix": "x"}},
        {"BACKEND": None},
        {"BACKEND": 42},
    ],
)
def test_check__alias_not_a_dict_or_no_backend__E003(config: object) -> None:
    with override_settings(LOCKS={"default": {"BACKEND": LOCMEM}, "reports": config}):
        assert lock_checks() == [
            Error(
                "LOCKS['reports'] must be a dict with a 'BACKEND' import string.",
                hint=HINT_E003,
                id="django_redis_lock.E003",
            )
        ]


def test_check__every_bad_alias_is_reported__E002_E003() -> None:
    with override_settings(LOCKS={"a": None, "b": {}}):
        assert [(m.id, m.msg) for m in lock_checks()] == [
            ("django_redis_lock.E002", "LOCKS has no 'default' alias."),
            (
                "django_redis_lock.E003",
                "LOCKS['a'] must be a dict with a 'BACKEND' import string.",
            ),
            (
                "django_redis_lock.E003",
                "LOCKS['b'] must be a dict with a 'BACKEND' import string.",
            ),
        ]


# E004 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (
            "django_redis_lock.backends.nope.NopeBackend",
            "No module named 'django_redis_lock.backends.nope'",
        ),
        (
            "django_redis_lock.backends.redis.RedisBackendd",
            'Module "django_redis_lock.backends.redis" does not define a "RedisBackendd" '
            "attribute/class",
        ),
        ("RedisBackend", "RedisBackend doesn't look like a module path"),
    ],
)
def test_check__backend_does_not_import__E004(path: str, reason: str) -> None:
    with override_settings(LOCKS={"default": {"BACKEND": path}}):
        assert lock_checks() == [
            Error(
                f"LOCKS['default']['BACKEND'] {path!r} could not be imported: {reason}.",
                hint=HINT_E004,
                id="django_redis_lock.E004",
            )
        ]


# E005 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "django_redis_lock.exceptions.LockError",  # a class, not a backend
        "django_redis_lock.backends.redis.redact_url",  # a function
        "django.core.cache.backends.locmem.LocMemCache",  # another kind of backend
        "django_redis_lock.backends.redis.URL_SCHEMES",  # a constant
    ],
)
def test_check__backend_not_a_lock_backend__E005(path: str) -> None:
    with override_settings(LOCKS={"default": {"BACKEND": path}}):
        assert lock_checks() == [
            Error(
                f"LOCKS['default']['BACKEND'] {path!r} is not a lock backend.",
                hint=HINT_E005,
                id="django_redis_lock.E005",
            )
        ]


# E006 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "type_name"),
    [(["url", DOWN_URL], "list"), ("url=redis://", "str"), (None, "NoneType")],
)
def test_check__options_not_a_dict__E006(options: object, type_name: str) -> None:
    with override_settings(LOCKS={"default": {"BACKEND": REDIS, "OPTIONS": options}}):
        assert lock_checks() == [
            Error(
                f"LOCKS['default']['OPTIONS'] must be a dict, got {type_name}.",
                hint=HINT_E006,
                id="django_redis_lock.E006",
            )
        ]


# E007 ---------------------------------------------------------------------------------------


def test_check__unknown_option__E007() -> None:
    options = {"url": DOWN_URL, "tll": 30}  # url is a RedisBackend option only
    with override_settings(LOCKS={"default": {"BACKEND": LOCMEM, "OPTIONS": options}}):
        assert lock_checks() == [
            Error(
                "LOCKS['default']['OPTIONS'] has unknown keys for LocMemBackend: 'tll', 'url'.",
                hint="LocMemBackend accepts: key_prefix, max_hold, ttl.",
                id="django_redis_lock.E007",
            )
        ]


def test_check__unknown_redis_option__E007() -> None:
    with override_settings(LOCKS={"default": redis_alias(pasword=SECRET)}):
        messages = lock_checks()
    assert [(m.id, m.msg) for m in messages] == [
        (
            "django_redis_lock.E007",
            "LOCKS['default']['OPTIONS'] has unknown keys for RedisBackend: 'pasword'.",
        )
    ]
    assert messages[0].hint == (
        "RedisBackend accepts: cache, client, fencing_ttl, key_prefix, max_hold, sentinels, "
        "service_name, socket_connect_timeout, socket_timeout, ttl, url, wait_replicas, "
        "wait_replicas_timeout, and redis-py connection keywords such as password, "
        "ssl_ca_certs or max_connections."
    )


def test_check__tls_options_without_rediss_url__E012() -> None:
    with override_settings(
        LOCKS={"default": redis_alias(url="redis://h:6379/0", ssl_ca_certs="/ca.pem")}
    ):
        assert lock_checks() == [
            Error(
                "LOCKS['default']['OPTIONS'] sets TLS options ('ssl_ca_certs') but its url "
                "does not start with rediss://.",
                hint="Use a rediss:// URL to connect with TLS, or remove the ssl_* options.",
                id="django_redis_lock.E012",
            )
        ]
    with override_settings(
        LOCKS={"default": redis_alias(url="rediss://h:6380/0", ssl_ca_certs="/ca.pem")}
    ):
        assert lock_checks() == []


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_connections", 7),
        ("password", SECRET),
        ("username", "app"),
        ("health_check_interval", 15),
        ("client_name", "locks"),
    ],
)
def test_check__redis_pool_keyword__accepted(
    option: str, value: object, connections: list[object]
) -> None:
    with override_settings(LOCKS={"default": redis_alias(**{option: value})}):
        assert lock_checks() == []
        pool = locks["default"].client.connection_pool
        passed = {"max_connections": pool.max_connections, **pool.connection_kwargs}
        assert passed[option] == value
    assert connections == []


# E008 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:6379/0", "http://127.0.0.1:6379/0"),
        ("http://user:s3cret@127.0.0.1:6379/0", "http://user:***@127.0.0.1:6379/0"),
        ("http://:s3cret@cache.internal/0", "http://:***@cache.internal/0"),
        ("127.0.0.1:6379", "127.0.0.1:6379"),
        ("", ""),
    ],
)
def test_check__unsupported_url_scheme__E008(url: str, shown: str) -> None:
    with override_settings(LOCKS={"default": redis_alias(url)}):
        messages = lock_checks()
    assert messages == [
        Error(
            f"LOCKS['default']['OPTIONS'] has a URL with an unsupported scheme: {shown!r}.",
            hint=HINT_E008,
            id="django_redis_lock.E008",
        )
    ]
    assert SECRET not in str(messages[0])


def test_check__unsupported_url_scheme__hides_query_password__E008() -> None:
    # redis-py reads ?password=... as the password, so it is as secret as user:password@.
    with override_settings(
        LOCKS={"default": redis_alias(f"http://127.0.0.1:6379/0?password={SECRET}")}
    ):
        messages = lock_checks()
    assert [m.id for m in messages] == ["django_redis_lock.E008"]
    assert SECRET not in str(messages[0])


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0",
        "rediss://user:s3cret@cache.internal:6380/2",
        "unix:///run/redis/redis.sock?db=1",
    ],
)
def test_check__supported_url_scheme__no_error(url: str) -> None:
    with override_settings(LOCKS={"default": redis_alias(url)}):
        assert lock_checks() == []


HINT_E008_PARSE = (
    "Write it as redis://[[user]:password@]host[:port][/db], rediss://... or "
    "unix:///path/to/socket[?db=N], with the user name and password percent-encoded "
    "(urllib.parse.quote(password, safe=''))."
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://host:abc/0", "'redis://host:abc/0' (Port could not be cast to integer "
         "value as 'abc')"),
        ("redis://host/0?socket_timeout=abc", "'redis://host/0?socket_timeout=abc' (Invalid "
         "value for 'socket_timeout' in connection URL.)"),
        # An error about a URL with a password could quote it: it is not repeated.
        ("redis://:s3cret@host:abc/0", "'redis://:***@host:abc/0' (the error is not shown: "
         "it could quote the password)"),
    ],
)  # fmt: skip
def test_check__unparsable_url__E008(url: str, shown: str) -> None:
    with override_settings(LOCKS={"default": redis_alias(url=url)}):
        assert lock_checks() == [
            Error(
                f"LOCKS['default']['OPTIONS'] has a URL that could not be parsed: {shown}.",
                hint=HINT_E008_PARSE,
                id="django_redis_lock.E008",
            )
        ]


HINT_E008_ENCODE = (
    "Percent-encode the user name and password, e.g. with urllib.parse.quote(password, "
    "safe=''): '/' is %2F, '?' %3F, '#' %23 and '@' %40."
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # urllib ends the host part at the first '/', '?' or '#', and read "Kx9fQ2mZ7pLw" as
        # the port: its error quoted it, and with it a piece of the password.
        ("redis://default:Kx9fQ2mZ7pLw/Ab+cd==@host:6379/0", "redis://default:***@host:6379/0"),
        ("redis://user:p@ss/w@host", "redis://user:***@host"),
        ("redis://:Hq4#Wz2@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://u:Jm5?Bx3@host:6380/0", "rediss://u:***@host:6380/0"),
        ("redis://u/x:pw@host/0", "redis://***@host/0"),
        # An '@' after the host reads the same way: written %40, it is not ambiguous.
        ("redis://host/0?client_name=a@b", "redis://***@b"),
    ],
)
def test_check__password_that_urllib_misreads__E008(url: str, shown: str) -> None:
    message = (
        f"has a URL that could not be parsed: {shown!r} (a '/', '?' or '#' comes before its "
        "last '@', so a user name or password holds one, or an '@' follows the host)."
    )
    with override_settings(LOCKS={"default": redis_alias(url=url)}):
        assert lock_checks() == [
            Error(
                f"LOCKS['default']['OPTIONS'] {message}",
                hint=HINT_E008_ENCODE,
                id="django_redis_lock.E008",
            )
        ]
        with pytest.raises(InvalidLockBackendError) as raised:
            locks["default"]
    assert str(raised.value) == f"LOCKS['default']['OPTIONS'] {message} {HINT_E008_ENCODE}"
    with pytest.raises(InvalidLockBackendError) as raised:
        RedisBackend(url=url)
    assert str(raised.value) == f"RedisBackend OPTIONS {message} {HINT_E008_ENCODE}"


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:Gd8@Wm3@host:6379/0",  # '@' in a password: the last one ends it
        "redis://u:a:b+c=d%e@host:6379/0",
        "unix:///run/redis@6379/redis.sock?db=1",  # no host part: the '@' is the path's
        "unix://:pw@/run/redis/redis.sock",
    ],
)
def test_check__password_that_urllib_reads__no_E008(url: str) -> None:
    with override_settings(LOCKS={"default": redis_alias(url=url)}):
        assert lock_checks() == []


@pytest.mark.parametrize(
    "query", ["decode_responses=true", "decode_responses=1", "db=1&decode_responses=no"]
)
def test_check__url_sets_decode_responses__E008(query: str) -> None:
    url = f"redis://127.0.0.1:1/0?{query}"
    message = f"has a URL that sets decode_responses: {url!r}."
    hint = "Remove decode_responses from the URL: the backend reads raw bytes."
    with override_settings(LOCKS={"default": redis_alias(url=url)}):
        assert lock_checks() == [
            Error(f"LOCKS['default']['OPTIONS'] {message}", hint=hint, id="django_redis_lock.E008")
        ]
    with pytest.raises(InvalidLockBackendError) as raised:
        RedisBackend(url=url)
    assert str(raised.value) == f"RedisBackend OPTIONS {message} {hint}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:1/0?tmeout=5", " ('tmeout'): 'redis://127.0.0.1:1/0?tmeout=5'"),
        # After password=, an '&' is taken for part of the password: nothing of it is named.
        (f"redis://127.0.0.1:1/0?password={SECRET}&Bv9=Pq1", ": 'redis://127.0.0.1:1/0?password=***'"),
    ],
)  # fmt: skip
def test_check__url_sets_options_redis_py_does_not_take__E008(url: str, shown: str) -> None:
    hint = "Remove them from the query; a password given as ?password= must write '&' as %26."
    with override_settings(LOCKS={"default": redis_alias(url=url)}):
        assert lock_checks() == [
            Error(
                "LOCKS['default']['OPTIONS'] has a URL that sets options that redis-py's "
                f"connections do not take{shown}.",
                hint=hint,
                id="django_redis_lock.E008",
            )
        ]
    with pytest.raises(InvalidLockBackendError, match="do not take"):
        RedisBackend(url=url)


def test_runtime__unparsable_url_raises_invalid_backend() -> None:
    with pytest.raises(InvalidLockBackendError, match="could not be parsed"):
        RedisBackend(url="redis://host/0?socket_timeout=abc")


# E009 ---------------------------------------------------------------------------------------

DURATIONS = [
    "ttl",
    "max_hold",
    "socket_timeout",
    "socket_connect_timeout",
    "fencing_ttl",
    "wait_replicas_timeout",
]
#: The durations that 0 turns off.
SWITCHES = {"fencing_ttl"}
#: The durations that may be None.
OPTIONAL = {"max_hold"}


@pytest.mark.parametrize("option", DURATIONS)
@pytest.mark.parametrize(
    ("value", "must"),
    [
        *[(value, "be a finite number of seconds of at least 0.001, got")
          for value in [0, -1, 0.0009, math.nan, math.inf, -math.inf, -(10**400)]],
        *[(value, f"be a number of seconds, not {type(value).__name__}:")
          for value in ["30", True, None]],
        *[(value, "be at most 315360000 seconds (ten years), got")
          for value in [1e18, 315360000.001, 10**400]],
    ],
)  # fmt: skip
def test_check__duration_out_of_range__E009(option: str, value: object, must: str) -> None:
    if option in OPTIONAL and value is None:  # None is what leaving it out means
        with override_settings(LOCKS={"default": redis_alias(**{option: value})}):
            assert lock_checks() == []
        return
    if option in SWITCHES and must.startswith("be a finite number of seconds of at least"):
        must = "be a finite number of seconds >= 0 (0: off), got"
        if value in (0, 0.0009):  # 0 turns it off; anything above is a duration
            with override_settings(LOCKS={"default": redis_alias(**{option: value})}):
                assert lock_checks() == []
            return
    with override_settings(LOCKS={"default": redis_alias(**{option: value})}):
        assert lock_checks() == [
            Error(
                f"LOCKS['default']['OPTIONS'][{option!r}] must {must} {value!r}.",
                hint=HINT_E009,
                id="django_redis_lock.E009",
            )
        ]


def test_check__ttl_not_positive__E009() -> None:
    with override_settings(LOCKS={"default": {"BACKEND": LOCMEM, "OPTIONS": {"ttl": 0}}}):
        assert lock_checks() == [
            Error(
                "LOCKS['default']['OPTIONS']['ttl'] must be a finite number of seconds of at "
                "least 0.001, got 0.",
                hint=HINT_E009,
                id="django_redis_lock.E009",
            )
        ]


def test_check__ttl_too_long__E009_and_refused_by_the_handler() -> None:
    setting = {"default": {"BACKEND": LOCMEM, "OPTIONS": {"ttl": 1e18}}}
    message = (
        "LOCKS['default']['OPTIONS']['ttl'] must be at most 315360000 seconds (ten years), "
        "got 1e+18."
    )
    with override_settings(LOCKS=setting):
        assert lock_checks() == [Error(message, hint=HINT_E009, id="django_redis_lock.E009")]
        with pytest.raises(InvalidLockBackendError) as raised:
            locks["default"]
    assert str(raised.value) == f"{message} {HINT_E009}"


@pytest.mark.parametrize("option", DURATIONS)
@pytest.mark.parametrize("value", [0.001, 0.5, 30, 86400.0, 315360000])
def test_check__duration_positive__no_error(option: str, value: float) -> None:
    with override_settings(LOCKS={"default": redis_alias(**{option: value})}):
        assert lock_checks() == []


MAX_HOLD_ALIASES = {
    "redis": redis_alias(),
    "sentinel": redis_alias(sentinels=["127.0.0.1:26379"], service_name="mymaster"),
    "cluster": {"BACKEND": CLUSTER, "OPTIONS": {"startup_nodes": ["127.0.0.1:1"]}},
    "redlock": {
        "BACKEND": REDLOCK,
        "OPTIONS": {"urls": [f"redis://127.0.0.1:{n}/0" for n in (1, 2, 3)]},
    },
    "locmem": {"BACKEND": LOCMEM, "OPTIONS": {}},
}


@pytest.mark.parametrize("kind", MAX_HOLD_ALIASES)
@pytest.mark.parametrize(
    ("value", "must"),
    [
        (0, "be a finite number of seconds of at least 0.001, got 0."),
        ("1h", "be a number of seconds, not str: '1h'."),
        (1e18, "be at most 315360000 seconds (ten years), got 1e+18."),
    ],
)
def test_check__bad_max_hold_option__E009_on_every_backend(
    kind: str, value: object, must: str
) -> None:
    alias = MAX_HOLD_ALIASES[kind]
    setting = {"default": {**alias, "OPTIONS": {**alias["OPTIONS"], "max_hold": value}}}
    message = f"LOCKS['default']['OPTIONS']['max_hold'] must {must}"
    with override_settings(LOCKS=setting):
        assert lock_checks() == [Error(message, hint=HINT_E009, id="django_redis_lock.E009")]
        with pytest.raises(InvalidLockBackendError) as raised:
            locks["default"]
    assert str(raised.value) == f"{message} {HINT_E009}"


@pytest.mark.parametrize("kind", MAX_HOLD_ALIASES)
@pytest.mark.parametrize("value", [None, 0.5, 3600])
def test_check__max_hold_option__accepted_alike_by_every_backend(kind: str, value: object) -> None:
    alias = MAX_HOLD_ALIASES[kind]
    setting = {"default": {**alias, "OPTIONS": {**alias["OPTIONS"], "max_hold": value}}}
    with override_settings(LOCKS=setting):
        assert lock_checks() == []
        if kind != "cluster":  # it connects when built: tests/contract builds it on a cluster
            assert locks["default"].default_max_hold == value


# E010 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "{lock}", "lock{", "lock}", 5, None])
def test_check__bad_key_prefix__E010(prefix: object) -> None:
    with override_settings(LOCKS={"default": redis_alias(key_prefix=prefix)}):
        assert lock_checks() == [
            Error(
                "LOCKS['default']['OPTIONS']['key_prefix'] must be a non-empty string without "
                f"braces, got {prefix!r}.",
                hint=HINT_E010,
                id="django_redis_lock.E010",
            )
        ]


# Several problems, valid settings -------------------------------------------------------------


def test_check__every_problem_of_an_alias_is_reported__E007_E008_E009_E010() -> None:
    config = redis_alias("http://cache/0", ttl=0, socket_timeout=-1, key_prefix="", bogus=1)
    with override_settings(LOCKS={"default": config}):
        assert [m.id for m in lock_checks()] == [
            "django_redis_lock.E007",
            "django_redis_lock.E008",
            "django_redis_lock.E009",
            "django_redis_lock.E009",
            "django_redis_lock.E010",
        ]


def test_check__valid_config__no_errors() -> None:
    value = {
        "default": redis_alias(
            key_prefix="myapp:locks",
            ttl=0.5,
            fencing_ttl=3600,
            socket_timeout=2,
            socket_connect_timeout=1.5,
            max_connections=20,
        ),
        "local": {"BACKEND": LOCMEM, "OPTIONS": {"key_prefix": "local", "ttl": 10}},
        "bare": {"BACKEND": LOCMEM},
    }
    with override_settings(LOCKS=value):
        assert lock_checks() == []


def test_check__suite_config__no_errors() -> None:
    assert lock_checks() == []


def test_check__no_locks_setting__default_config_no_errors(connections: list[object]) -> None:
    with without_locks_setting():
        assert not hasattr(settings, "LOCKS")
        assert lock_checks() == []
    assert connections == []


# manage.py check ----------------------------------------------------------------------------


def test_check_command__bad_setting__raises_with_id() -> None:
    with (
        override_settings(LOCKS={"default": redis_alias(ttl=0)}),
        pytest.raises(SystemCheckError) as raised,
    ):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    text = str(raised.value)
    assert "django_redis_lock.E009" in text
    assert "LOCKS['default']['OPTIONS']['ttl']" in text


def test_check_command__good_setting__passes_without_contacting_redis(
    connections: list[object],
) -> None:
    stdout = io.StringIO()
    with override_settings(LOCKS={"default": redis_alias(DOWN_URL)}):
        call_command("check", stdout=stdout, stderr=io.StringIO())
    assert "System check identified no issues" in stdout.getvalue()
    assert connections == []


# E011 (deploy only: contacts every backend) -------------------------------------------------


def test_check__deploy_unreachable_backend__E011(redis_url: str) -> None:
    value = {
        "default": redis_alias(redis_url),
        "down": redis_alias(f"redis://user:{SECRET}@127.0.0.1:1/0", socket_connect_timeout=2),
        "local": {"BACKEND": LOCMEM},
    }
    with override_settings(LOCKS=value):
        messages = lock_checks(deploy=True)
    assert [(m.id, m.level, m.hint) for m in messages] == [
        ("django_redis_lock.E011", ERROR, HINT_E011)
    ]
    assert messages[0].msg.startswith("LOCKS['down'] cannot be reached: ")
    assert "user:***@127.0.0.1:1" in messages[0].msg
    assert SECRET not in messages[0].msg


def test_check__deploy_unreachable_backend__hides_query_password__E011() -> None:
    value = {"default": redis_alias(f"redis://127.0.0.1:1/0?password={SECRET}")}
    with override_settings(LOCKS=value):
        messages = lock_checks(deploy=True)
    assert [m.id for m in messages] == ["django_redis_lock.E011"]
    assert SECRET not in messages[0].msg


def test_check__deploy_server_refuses_command__E011(redis_url: str) -> None:
    # The server answers, but rejects the connection's setup (no database 99): a report,
    # not a crash of manage.py check --deploy.
    value = {"default": redis_alias(redis_url.rsplit("/", 1)[0] + "/99")}
    with override_settings(LOCKS=value):
        messages = lock_checks(deploy=True)
    assert [m.id for m in messages] == ["django_redis_lock.E011"]
    assert messages[0].msg.startswith("LOCKS['default'] cannot be reached: ")


def test_check_command__deploy_unreachable_backend__raises_E011() -> None:
    value = {"default": redis_alias(f"redis://user:{SECRET}@127.0.0.1:1/0")}
    with override_settings(LOCKS=value), pytest.raises(SystemCheckError) as raised:
        call_command("check", "--deploy", stdout=io.StringIO(), stderr=io.StringIO())
    text = str(raised.value)
    assert "django_redis_lock.E011" in text
    assert "LOCKS['default'] cannot be reached" in text
    assert SECRET not in text


def test_check__deploy_reachable_backend__no_E011(redis_url: str) -> None:
    value = {"default": redis_alias(redis_url), "local": {"BACKEND": LOCMEM}}
    with override_settings(LOCKS=value):
        assert lock_checks(deploy=True) == []


def test_check__deploy_bad_setting__reports_config_only(connections: list[object]) -> None:
    with override_settings(LOCKS={"default": redis_alias(DOWN_URL, ttl=0)}):
        assert [m.id for m in lock_checks(deploy=True)] == ["django_redis_lock.E009"]
    assert connections == []


def test_check__deploy_leaves_process_handler_untouched(redis_url: str) -> None:
    assert locks._backends == {}
    assert lock_checks(deploy=True) == []
    assert locks._backends == {}


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"service_name": "mymaster"},
            "service_name is given without sentinels.",
        ),
        (
            {"sentinels": ["127.0.0.1:26379"]},
            "service_name must name the Sentinel-monitored primary, got None.",
        ),
        (
            {"sentinels": "127.0.0.1:26379", "service_name": "mymaster"},
            "sentinels must be a non-empty list of \"host:port\" strings, got '127.0.0.1:26379'.",
        ),
        (
            {"sentinels": ["127.0.0.1", ["h", "26379"]], "service_name": "mymaster"},
            "sentinels holds '127.0.0.1', which is not a \"host:port\" string or a [host, port] "
            "pair.",
        ),
        (
            {"wait_replicas": -1},
            "wait_replicas must be a whole number of replicas (0: do not wait), got -1.",
        ),
    ],
)
def test_check__bad_sentinel_or_replica_options__E014(
    options: dict[str, object], problem: str
) -> None:
    with override_settings(LOCKS={"default": redis_alias(**options)}):
        messages = lock_checks()
    assert (
        "django_redis_lock.E014",
        f"LOCKS['default']['OPTIONS']: {problem}",
        "See the OPTIONS of RedisBackend in the deployment documentation.",
    ) == (messages[0].id, messages[0].msg, messages[0].hint)
    with pytest.raises(InvalidLockBackendError, match=re.escape(problem)):
        RedisBackend(**options)  # type: ignore[arg-type]


def test_check__sentinel_options_that_fit__no_E014() -> None:
    options = {"sentinels": ["127.0.0.1:26379", ["127.0.0.1", 26380]], "service_name": "m"}
    with override_settings(LOCKS={"default": redis_alias(**options, wait_replicas=1)}):
        assert lock_checks() == []


# One rule, two callers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "options"),
    [
        (LOCMEM, {"tll": 30}),
        (LOCMEM, {"ttl": 1e18}),
        (LOCMEM, {"key_prefix": "{app}"}),
        (REDIS, {"url": f"http://:{SECRET}@cache/0"}),
        (REDIS, {"url": "redis://host/0?decode_responses=1"}),
        (REDIS, {"url": DOWN_URL, "wait_replicas_timeout": 0}),
        (REDIS, {"url": "redis://host/0", "ssl_ca_certs": "/ca.pem"}),
        (REDIS, {"service_name": "mymaster"}),
        (REDLOCK, {"urls": ["redis://a/0", "redis://b/0"]}),
        (REDLOCK, {"urls": ["redis://a/0", "redis://b/0", "ftp://c/0"]}),
        (CLUSTER, {"startup_nodes": ["127.0.0.1"]}),
        (CLUSTER, {"url": "unix:///run/redis.sock"}),
    ],
)
def test_check__the_constructor_refuses_what_the_check_reports(
    backend: str, options: dict[str, Any]
) -> None:
    with override_settings(LOCKS={"default": {"BACKEND": backend, "OPTIONS": options}}):
        first = lock_checks()[0]
    backend_class = import_string(backend)
    with pytest.raises(InvalidLockBackendError) as raised:
        backend_class(**options)
    message = first.msg.replace("LOCKS['default']['OPTIONS']", f"{backend_class.__name__} OPTIONS")
    assert str(raised.value) == f"{message} {first.hint}"
    assert SECRET not in str(raised.value)


def test_check__conf_and_a_locmem_setting_import_no_redis() -> None:
    # The LOCKS checks leave every rule of a backend to its own module: checking a setting
    # that names no Redis backend imports no client library.
    code = textwrap.dedent(
        f"""
        import sys
        import django_redis_lock.checks
        from django_redis_lock.conf import problems

        setting = {{"default": {{"BACKEND": {LOCMEM!r}, "OPTIONS": {{"ttl": 0}}}}}}
        assert [p.id for p in problems(setting)] == ["django_redis_lock.E009"]
        print(sorted(name for name in sys.modules if name.partition(".")[0] == "redis"))
        """
    )
    result = python_without_settings(code)
    assert (result.returncode, result.stdout, result.stderr) == (0, "[]\n", "")
