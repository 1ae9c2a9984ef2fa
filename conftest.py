"""Root pytest configuration, shared by the tests and the notebooks (run by nbmake).

Test runs execute the notebooks in their fast mode (small training) unless
KT_NOTEBOOK_FAST is already set; the notebook kernels inherit this variable.
"""

import os

os.environ.setdefault("KT_NOTEBOOK_FAST", "1")
