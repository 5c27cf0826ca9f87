"""Loading of the Lua scripts in ``lua/``: each one is the shared prelude, then the script,
with the slow-path helpers inserted where the script says ``--! helpers`` (after its fast
path has returned, so a free lock does not pay for defining them)."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

SCRIPT_NAMES = ("acquire", "release", "extend", "ttl", "force_release", "withdraw")

HELPERS_MARKER = "--! helpers"


@cache
def source(name: str) -> str:
    """Return the full source of script ``name``: prelude, script, helpers where marked."""
    lua = files(__package__).joinpath("lua")
    prelude = lua.joinpath("_prelude.lua").read_text("utf-8")
    helpers = lua.joinpath("_helpers.lua").read_text("utf-8")
    script = lua.joinpath(f"{name}.lua").read_text("utf-8")
    return f"{prelude}\n{script.replace(HELPERS_MARKER, helpers)}"
