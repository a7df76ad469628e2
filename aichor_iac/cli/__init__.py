"""`aichor-iac validate|render|preview|run|convert|schema`: the Pulumi expansion, offline.

Exit status: 0 on success, 2 when the manifest, the stack config or the command line has
problems (one line each on stderr; with `--output json` a document on stdout), 1 on an
unexpected failure. Never a traceback unless AICHOR_IAC_DEBUG is set.
"""

from __future__ import annotations

import os
import sys

from ..problems import ManifestError
from .process import collector_paused, ended, ends_with_command
from .report import report

__all__ = ["command", "main"]


def command() -> int:
    """`aichor-iac` (the console script, and `python -m aichor_iac.cli`): `main` in a process
    of its own, which ends with the command."""
    ends_with_command()
    status = main()
    ended()
    return status


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (for the exit flush)
        return 128 + 13  # as a process SIGPIPE ends


def _main(argv: list[str] | None) -> int:
    with collector_paused():  # (the commands' imports)
        from .parser import parser

        args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except ManifestError as error:
        report(args, error.source, error.problems)
        return 2
    except BrokenPipeError:
        raise
    except Exception as error:  # a bug of ours: say so in one line
        if os.environ.get("AICHOR_IAC_DEBUG"):
            raise
        print(
            f"aichor-iac: internal error: {type(error).__name__}: {error} "
            "(set AICHOR_IAC_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
