"""The parser of ``manage.py locks`` and the types of its arguments."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import NoReturn

from django.core.management.base import CommandError, CommandParser

from .._core.validation import validate_name
from ..exceptions import InvalidLockArgumentError

__all__ = ["LocksParser", "lock_name", "seconds", "whole_number"]


class LocksParser(CommandParser):
    """A parser whose usage errors exit 2 through ``call_command`` too, as from a shell.

    With a ``default_subcommand``, a command line that gives an option of no command's own
    before any subcommand runs that subcommand: ``locks --json`` is ``locks list --json``.
    """

    default_subcommand: str | None = None

    def error(self, message: str) -> NoReturn:
        if self.called_from_command_line:
            super().error(message)
        raise CommandError(f"Error: {message}", returncode=2)

    def parse_known_args(  # type: ignore[override]  # (typeshed's overloads, one signature)
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.default_subcommand is not None:
            args = self._with_default_subcommand(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def _with_default_subcommand(self, args: list[str]) -> list[str]:
        """Return ``args`` with the default subcommand before its first option, if needed."""
        index = 0
        while index < len(args):
            word = args[index]
            if word == "--" or not word.startswith("-"):
                return args  # a subcommand (or a mistake, which argparse reports)
            action, attached = self._own_option(word)
            if action is None:
                default = self.default_subcommand
                assert default is not None
                return [*args[:index], default, *args[index:]]
            index += 1 if attached or action.nargs == 0 else 2
        return args

    def _own_option(self, word: str) -> tuple[argparse.Action | None, bool]:
        """Return the option of this parser that ``word`` starts, and if its value is in it."""
        options = {name: a for a in self._actions for name in a.option_strings}
        name, equals, _ = word.partition("=")
        if name in options:
            return options[name], bool(equals)
        if not word.startswith("--") and word[:2] in options:  # -v2: a value attached
            return options[word[:2]], True
        if word.startswith("--") and self.allow_abbrev:
            matches = {a for option, a in options.items() if option.startswith(name)}
            if len(matches) == 1:
                return matches.pop(), bool(equals)
        return None, False


def whole_number(text: str) -> int:
    """Return ``text`` as a whole number of at least 1, else raise ArgumentTypeError."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def seconds(text: str) -> float:
    """Return ``text`` as a finite number of seconds >= 0, else raise ArgumentTypeError."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def lock_name(text: str) -> str:
    """Return ``text`` if it is a usable lock name, else raise ArgumentTypeError."""
    try:
        return validate_name(text)
    except InvalidLockArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
