"""A quiet start for the command line: TensorFlow's start-up noise held back.

`python -m keras_transformer ...` and `keras-transformer ...` import this
package, and with it Keras and TensorFlow, before the command runs; the first
lines a newcomer would read are TensorFlow's ("All log messages before
absl::InitializeLog() ...", oneDNN's notice, the CUDA driver probe twice, then
"failed call to cuInit" on a machine without a GPU). For the command line,
unless the user set `TF_CPP_MIN_LOG_LEVEL` or gave `--verbose`:

- `TF_CPP_MIN_LOG_LEVEL=3`: TensorFlow's C++ runtime logs nothing below a
  fatal error (a real failure reaches the user as a Python exception);
- what TensorFlow's libraries print to stderr while they load, before any
  setting can take effect, is held back, and shown if the import fails.

Importing the package from Python (a script, a notebook) changes nothing.
"""

import contextlib
import os
import sys
import tempfile

PACKAGE = "keras_transformer"
COMMAND = "keras-transformer"


def is_command_line():
    """Whether this process is `python -m keras_transformer` or `keras-transformer`."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    module = "-m" in argv[:-1] and argv[argv.index("-m") + 1] == PACKAGE
    return module or os.path.basename(sys.argv[0]) == COMMAND


def wanted():
    """Whether to quiet this start: the command line, and the user asked for nothing."""
    verbose = any(arg.startswith("--verb") for arg in sys.argv[1:])  # argparse's abbreviations
    return is_command_line() and not verbose and "TF_CPP_MIN_LOG_LEVEL" not in os.environ


@contextlib.contextmanager
def quiet():
    """Run the imports of the block quietly, if `wanted()` (see the module docstring)."""
    if not wanted():
        yield
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no stderr to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            held.seek(0)
            sys.stderr.write(held.read().decode("utf-8", "replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
