"""`python -m keras_transformer ...`: see `keras_transformer.cli`."""

import sys

from keras_transformer.cli import main

sys.exit(main())
