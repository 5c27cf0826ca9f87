"""A resource that uses fencing tokens: it refuses writes from a holder whose lease ended.

A lease can end while its holder is paused (a long GC pause, a swapped-out VM). The holder
wakes up believing it still holds the lock and writes. The lock cannot stop that write;
the resource can, if every writer passes the fencing token its acquire returned, because
tokens grow with each new holder.
"""

from __future__ import annotations

import redis

from .state import demo_key

# KEYS[1] the value  KEYS[2] the highest token accepted  KEYS[3] the tokens refused (a list)
# ARGV[1] the writer's fencing token  ARGV[2] the new value
# Returns 1 if written, 0 if refused because a newer token was accepted before.
WRITE_SCRIPT = """
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < highest then
  redis.call('RPUSH', KEYS[3], ARGV[1])
  return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


class FencedStorage:
    """A value in Redis that only the newest holder of a lock may overwrite."""

    def __init__(self, client: redis.Redis, name: str = "invoice-42") -> None:
        self.client = client
        self.keys = [demo_key(f"{name}:{part}") for part in ("value", "highest", "refused")]
        self._write = client.register_script(WRITE_SCRIPT)

    def write(self, value: str, *, token: int) -> bool:
        """Store ``value`` unless a newer token than ``token`` was accepted; return if stored."""
        return bool(self._write(keys=self.keys, args=[token, value]))

    def highest_token(self) -> int | None:
        """Return the newest fencing token accepted so far, or None."""
        token = self.client.get(self.keys[1])
        return None if token is None else int(token)

    def refused_tokens(self) -> list[int]:
        """Return the tokens of every write refused so far, oldest first."""
        return [int(token) for token in self.client.lrange(self.keys[2], 0, -1)]
