"""``python -m rmqtool`` and the ``rmqtool`` command."""
import sys


def _forget_interrupts_inside_eval() -> None:
    """CPython marks a KeyboardInterrupt that leaves an ``eval``/``exec`` of a string (typer reads
    the commands' annotations that way while the CLI loads) and, after the interpreter has finished,
    kills itself with SIGINT instead of returning our exit code. A completed ``exec`` of a string
    clears the mark; an interrupt that really leaves the program still sets it again on the way out."""
    exec("")


def run() -> None:
    """The CLI. Ctrl-C at any moment, even while the command's modules are still loading,
    ends with "interrupted" and exit 130, never a traceback."""
    try:
        from rmqtool.cli import main
        main()
    except KeyboardInterrupt:
        from rmqtool.errors import EXIT_INTERRUPTED
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        _forget_interrupts_inside_eval()


if __name__ == "__main__":
    run()
