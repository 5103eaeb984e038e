"""Entry point: ``ctxsel {select,answer,eval,train,mine,env,make-holo,serve} ...``.

Errors a user can fix (bad input, missing files or extras) print one line
to stderr and exit 2 (an optional package a command imports without a guard
of its own, too: ``errors.missing_extra_error``); ``CTXSEL_DEBUG=1`` shows the traceback instead.
Warnings (e.g. text the embedding model's window cut) print as one
``ctxsel CMD: warning: ...`` line. ``--no-progress`` also sets
``TQDM_DISABLE=1``, so bars of the libraries underneath stay quiet too.

Output into a pipe that closed early (``ctxsel select ... | head -1``)
ends quietly with exit status 141 (128 + SIGPIPE), as cat, yes and
other Unix tools report it: no traceback, no error line.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ctxsel._version import __version__
from ctxsel.cli import answer_cmd, env_cmd, eval_cmd, make_holo_cmd, mine_cmd, select_cmd, serve_cmd, train_cmd
from ctxsel.cli.config_file import ConfigArgumentParser
from ctxsel.errors import CtxselError, missing_extra_error
from ctxsel.paths import os_error_words

#: the exit status of a command whose output pipe closed: a shell's status for SIGPIPE
EXIT_CLOSED_PIPE = 141

SUBCOMMANDS = (select_cmd, answer_cmd, eval_cmd, train_cmd, mine_cmd, env_cmd, make_holo_cmd, serve_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxsel",
        description="Decide how much of a long context an LLM should read.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ctxsel {__version__}")
    # a subcommand's parser reads --config FILE where the command has it (cli/config_file.py)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ConfigArgumentParser)
    for mod in SUBCOMMANDS:
        # the raw formatter keeps the usage examples in each module docstring as lines
        p = sub.add_parser(
            mod.NAME, help=mod.HELP, description=mod.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        mod.add_arguments(p)
        p.set_defaults(run=mod.run)
    return parser


@contextmanager
def one_line_warnings(command: str) -> Iterator[None]:
    """Show each warning as ``ctxsel CMD: warning: message`` (no source line, no file path)."""
    shown = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        print(f"ctxsel {command}: warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll says POLLERR); True where that
    cannot be asked, as the BrokenPipeError most likely came from it."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is no file
        return True


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush at exit finds somewhere to write
    (else it prints "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # stdout is no file (a test's capture): nothing to flush
        pass


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tqdm_disable = os.environ.get("TQDM_DISABLE")
    if getattr(args, "no_progress", False):
        os.environ["TQDM_DISABLE"] = "1"  # every tqdm bar without an explicit disable= (libraries' too)
    try:
        with one_line_warnings(args.command):
            rc = int(args.run(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not at exit as "Exception ignored ..."
            return rc
    except BrokenPipeError:
        if not _stdout_closed():  # another pipe or socket (an HTTP reader's): an error like any other
            if os.environ.get("CTXSEL_DEBUG"):
                raise
            print(f"ctxsel {args.command}: error: broken pipe (a connection closed while writing)", file=sys.stderr)
            return 2
        _silence_stdout()
        return EXIT_CLOSED_PIPE
    except (CtxselError, OSError, UnicodeDecodeError) as e:  # the input, the settings or the machine: fixable
        if os.environ.get("CTXSEL_DEBUG"):
            raise
        print(f"ctxsel {args.command}: error: {os_error_words(e)}", file=sys.stderr)  # a full disk in words
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # anything else is a bug in ctxsel (or a library), not the user's input
        if os.environ.get("CTXSEL_DEBUG"):
            raise
        missing = missing_extra_error(e) if isinstance(e, ImportError) else None
        if missing is not None:  # an extra that is not installed: the user's to fix
            print(f"ctxsel {args.command}: error: {missing}", file=sys.stderr)
            return 2
        print(
            f"ctxsel {args.command}: internal error: {type(e).__name__}: {e}\n"
            "this is a bug: rerun with CTXSEL_DEBUG=1 to see the traceback, and please report it",
            file=sys.stderr,
        )
        return 1
    finally:  # a caller in the same process (a test, a notebook) keeps its environment
        if tqdm_disable is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = tqdm_disable


if __name__ == "__main__":
    sys.exit(main())
