"""``python -m rmqtool`` and the ``rmqtool`` command."""
import sys


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


if __name__ == "__main__":
    run()
