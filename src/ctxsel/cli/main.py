"""Entry point: ``ctxsel {select,answer,eval,train,mine,env,make-holo,serve} ...``.

Errors a user can fix (bad input, missing files or extras) print one line
to stderr and exit 2; ``CTXSEL_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ctxsel import __version__
from ctxsel.llm.base import LLMError
from ctxsel.cli import answer_cmd, env_cmd, eval_cmd, make_holo_cmd, mine_cmd, select_cmd, serve_cmd, train_cmd

SUBCOMMANDS = (select_cmd, answer_cmd, eval_cmd, train_cmd, mine_cmd, env_cmd, make_holo_cmd, serve_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxsel", description="Decide how much of a long context an LLM should read.")
    parser.add_argument("--version", action="version", version=f"ctxsel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for mod in SUBCOMMANDS:
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.__doc__)
        mod.add_arguments(p)
        p.set_defaults(run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (ValueError, FileNotFoundError, ImportError, UnicodeDecodeError, TypeError, LLMError) as e:
        if os.environ.get("CTXSEL_DEBUG"):
            raise
        print(f"ctxsel {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
