"""``python -m rmqtool`` and the ``rmqtool`` command."""
import gc
import os
import sys

#: numpy's OpenBLAS starts a thread per CPU at import that spins for a while; rmqtool makes no
#: BLAS call, and on two CPUs that spin took 0.1 s of CPU from every command's start (measured
#: here: ``import numpy`` 0.28 -> 0.17 s of CPU). A value the user set is kept.
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def _forget_interrupts_inside_eval() -> None:
    """CPython marks a KeyboardInterrupt that leaves an ``eval``/``exec`` of a string (typer reads
    the commands' annotations that way while the CLI loads) and, after the interpreter has finished,
    kills itself with SIGINT instead of returning our exit code. A completed ``exec`` of a string
    clears the mark; an interrupt that really leaves the program still sets it again on the way out."""
    exec("")


def _settled() -> None:
    """The objects alive when the exit code is decided are kept until the process ends:
    ``gc.freeze`` takes them out of the cyclic collector's passes, so the interpreter's collection at
    exit no longer walks a command's results to find them alive (20 ms after a rebuild of 1M
    messages). Threads are joined and exit functions run as before; an object still alive at exit is
    no longer finalized by that last collection, so rmqtool leaves nothing to a finalizer at exit: its
    files are closed and its temporary directories removed explicitly or by exit functions."""
    gc.freeze()


def _decided(code) -> None:
    """The exit code is final and the output complete: a Ctrl-C from here on is ignored, through
    the interpreter's shutdown (flushes, thread joins, atexit) too. Python puts back the default
    SIGINT action while it finalizes, which would kill the process (-2); an ignored signal stays
    ignored. ``signal.signal`` first runs a handler already due, so a Ctrl-C that came just
    before raises KeyboardInterrupt here, and is reported as one."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _settled()
    raise SystemExit(code)


def run() -> None:
    """The CLI. Ctrl-C at any moment, even while the command's modules are still loading or after
    its output is complete, ends with "interrupted" and exit 130, or with the command's own exit
    code once its output is complete; never a traceback, never death by SIGINT."""
    for name, value in BLAS_THREADS.items():
        os.environ.setdefault(name, value)
    try:
        try:
            from rmqtool.cli import startup
            if startup.answer(sys.argv[1:]):        # --version, or a --help typer rendered before
                _decided(0)
            from rmqtool.cli import main
            with startup.recording_help(sys.argv[1:]):
                main()
        except SystemExit as exc:
            _decided(exc.code)
    except KeyboardInterrupt:
        from rmqtool.errors import EXIT_INTERRUPTED
        sys.stderr.write("interrupted\n")
        _decided(EXIT_INTERRUPTED)
    finally:
        _forget_interrupts_inside_eval()


if __name__ == "__main__":
    run()
