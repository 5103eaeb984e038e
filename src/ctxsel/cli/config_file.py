"""``--config FILE``: a command's options read from a TOML file, the command line winning (TRL's pattern).

    ctxsel eval --config experiments/context_picker_hotpotqa.toml --limit 1

Each key is one of the command's long options, spelled with dashes or underscores (``n-ctx`` or
``n_ctx``); a key may also name the command's positional argument (``method = "picker"`` for
``ctxsel train``). Values: a string or number as typed on the command line, ``true`` for a flag
(``false`` leaves it off), a list for a comma-separated value (``methods = ["top-k@5", "full"]``) or
a repeated option. The file's options are read first and the command line's after them, so a value
given on the command line wins; an option the command line gives is not taken from the file at all
(a repeated option is not added to). An unknown key, a file that is missing or not TOML stops the
command with a one-line error that names the file, before anything runs.

Only commands that call :func:`add_config_argument` read a file; the parsing happens in
:class:`ConfigArgumentParser`, the class of every ``ctxsel`` subcommand's parser, so the file's
values pass through the same types and choices as typed ones.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

CONFIG_FLAG = "--config"


def add_config_argument(p: argparse.ArgumentParser) -> None:
    """Give a command ``--config FILE`` (read by :class:`ConfigArgumentParser` before the other options)."""
    p.add_argument(
        CONFIG_FLAG,
        default=None,
        metavar="FILE",
        help='read options from this TOML file (keys: the long options, e.g. methods = "top-k@5,full"); '
        "the command line wins over it",
    )


F = TypeVar("F", bound=Callable[..., Any])


def one_line(parse: F) -> F:
    """Mark an argparse type whose errors are input errors: one line naming the flag, no usage dump."""
    parse.one_line = True  # type: ignore[attr-defined]
    return parse


class ConfigArgumentParser(argparse.ArgumentParser):
    """An argument parser that reads ``--config FILE`` (where the command has the option) into its arguments."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        if any(CONFIG_FLAG in a.option_strings for a in self._actions):
            path = _config_path(argv)
            if path is not None:
                argv = config_argv(self, path, argv) + argv
        return super().parse_known_args(argv, namespace)

    def error(self, message: str) -> NoReturn:
        """A bad value of a flag whose type marks itself ``one_line`` (a spec, a number) is the one line
        that names the flag, as every other input error is; argparse's usage dump stays for the rest
        (a missing or unknown flag)."""
        flags, sep, why = message.partition(": ")
        if sep and flags.startswith("argument "):
            names = flags.removeprefix("argument ").split("/")
            action = self._option_string_actions.get(names[0])
            if action is not None and getattr(action.type, "one_line", False):
                _fail(self, f"{names[-1]}: {why}")
        super().error(message)


def _config_path(argv: list[str]) -> str | None:
    """The last ``--config`` value of ``argv`` (None when there is none)."""
    path = None
    for i, a in enumerate(argv):
        if a == CONFIG_FLAG and i + 1 < len(argv):
            path = argv[i + 1]
        elif a.startswith(CONFIG_FLAG + "="):
            path = a.split("=", 1)[1]
    return path


def _fail(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def read_config(parser: argparse.ArgumentParser, path: str) -> dict[str, Any]:
    """The file's table (a missing file or bad TOML ends the command with one line naming the file)."""
    import tomllib  # Python 3.11+

    try:
        with Path(path).open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        _fail(parser, f"--config: no such file: {path}")
    except OSError as e:
        _fail(parser, f"--config: cannot read {path}: {e.strerror or e}")
    except tomllib.TOMLDecodeError as e:
        _fail(parser, f"--config: {path} is not valid TOML: {e}")


def _find_action(parser: argparse.ArgumentParser, key: str) -> argparse.Action | None:
    flag = "--" + key.replace("_", "-")
    for action in parser._actions:
        if flag in action.option_strings or (not action.option_strings and action.dest == key.replace("-", "_")):
            return action
    return None


def _given(action: argparse.Action, argv: list[str]) -> bool:
    """Whether the command line gives this option (or, for a positional with choices, one of its values)."""
    if not action.option_strings:
        return any(a in (action.choices or ()) for a in argv)
    return any(a in action.option_strings or a.split("=", 1)[0] in action.option_strings for a in argv)


def _words(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_argv(parser: argparse.ArgumentParser, path: str, argv: list[str]) -> list[str]:
    """The file's options as command-line words, to be read before ``argv`` (whose options it leaves out)."""
    out: list[str] = []
    for key, value in read_config(parser, path).items():
        if isinstance(value, dict):
            _fail(parser, f"key {key!r} in {path}: a table is not an option value")
        action = _find_action(parser, key)
        if action is None or CONFIG_FLAG in action.option_strings or action.dest == "help":
            _fail(parser, f"unknown key {key!r} in {path} (not an option of `{parser.prog}`)")
        if _given(action, argv):
            continue
        if not action.option_strings:  # a positional: its value first
            out[:0] = [_words(value)]
            continue
        flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
        negatable = isinstance(action, argparse.BooleanOptionalAction)
        if negatable or action.nargs == 0:  # a flag: true sets it; false unsets it or leaves it off
            if not isinstance(value, bool):
                _fail(parser, f"key {key!r} in {path}: {flag} is a flag, give true or false")
            if value or negatable:
                out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            if isinstance(action, argparse._AppendAction):
                for v in value:
                    out += [flag, _words(v)]
            elif action.nargs in ("+", "*") or isinstance(action.nargs, int):
                out += [flag, *(_words(v) for v in value)]
            else:
                out += [flag, ",".join(_words(v) for v in value)]
        else:
            out += [f"{flag}={_words(value)}"]
    return out
