"""The ``vramscope`` console script of the wheel: the same CLI, run in process, with the same
exit codes (0 success, 1 ``--require-fit`` on a job that does not fit, 2 bad input)."""

from __future__ import annotations

import signal
import sys

from . import _native


def main() -> None:
    """Entry point of ``[project.scripts] vramscope``."""
    # Ctrl-C ends the command as it ends the binary (Python's handler would wait for the GIL).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    if sys.argv[1:2] == ["trace"]:
        from ._trace_cli import run

        sys.exit(run(sys.argv[2:]))
    code = _native.cli_main(["vramscope", *sys.argv[1:]])
    sys.exit(code)


if __name__ == "__main__":
    main()
