"""Loading of the Lua scripts in ``lua/``, each prefixed by the shared prelude."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

SCRIPT_NAMES = ("acquire", "release", "extend", "ttl", "force_release")


@cache
def source(name: str) -> str:
    """Return the full source of script ``name``: the prelude, then the script itself."""
    lua = files(__package__).joinpath("lua")
    return (
        lua.joinpath("_prelude.lua").read_text("utf-8")
        + "\n"
        + lua.joinpath(f"{name}.lua").read_text("utf-8")
    )
