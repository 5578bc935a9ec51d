"""``tb_neuraldbg.metadata``, the documented path of :mod:`tb_neuraldbg.format.metadata`.

The very same module object (not a copy), so names and patches agree.
"""

import sys

from .format import metadata as _metadata

sys.modules[__name__] = _metadata
