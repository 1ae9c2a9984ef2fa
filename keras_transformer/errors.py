"""The error for mistakes in what a user gives: arguments, option values, files.

The command line reports an `InputError` (and an `OSError` from the system:
a missing, unreadable or unwritable file, a full disk, a closed pipe) in one
line with exit status 2; any other exception is a bug in this package and is
reported with its traceback and exit status 1.
It is a `ValueError`, so Python callers catch it as before. `user_errors`
draws the line when a file is read: what the file makes Keras, h5py or the
file system raise is the user's; what this package's own code raises is a bug.
"""

import os

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


class InputError(ValueError):
    """A bad argument or option value, or a file that cannot be used."""


class user_errors:  # noqa: N801 - used as a `with` statement, like a function
    """Reports what reading `path` raises as `InputError("<path>: <problem> (...)")`.

    What Keras, h5py, `json` or the file system raise on a damaged, foreign or
    unreadable file is the user's to fix; an exception raised in this
    package's own code (a `from_config` or a `build` of ours, say) below the
    `with` statement is a bug and goes through unchanged, with its traceback.
    """

    def __init__(self, path, problem):
        self.path, self.problem = path, problem

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if error is None or isinstance(error, InputError) or not isinstance(error, Exception):
            return False
        if isinstance(error, OSError) and error.errno is not None:
            return False  # the system's word on the file (no permission, a full disk)
        if _raised_in_package(error, traceback.tb_next):
            return False
        raise InputError(f"{self.path}: {self.problem} ({error})") from error


def _raised_in_package(error, traceback):
    """Whether `traceback`, or that of an exception `error` was raised from or
    while handling (Keras re-raises a `from_config`'s `TypeError` as its own),
    runs a frame of this package's code."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        while traceback is not None:
            name = os.path.abspath(traceback.tb_frame.f_code.co_filename)
            if name.startswith(_PACKAGE + os.sep):
                return True
            traceback = traceback.tb_next
        error = error.__cause__ or error.__context__
        traceback = error.__traceback__ if error is not None else None
    return False
