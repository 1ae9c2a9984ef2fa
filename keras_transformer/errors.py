"""The error for mistakes in what a user gives: arguments, option values, files.

The command line reports an `InputError` (and an `OSError`, like a missing
or unwritable file) in one line with exit status 2; any other exception is a
bug in this package and is reported with its traceback and exit status 1.
It is a `ValueError`, so Python callers catch it as before.
"""


class InputError(ValueError):
    """A bad argument or option value, or a file that cannot be used."""
