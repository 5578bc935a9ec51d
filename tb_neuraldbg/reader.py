"""``tb_neuraldbg.reader``, the documented path of :mod:`tb_neuraldbg.offline.reader`.

The very same module object (not a copy), so names and patches agree.
"""

import sys

from .offline import reader as _reader

sys.modules[__name__] = _reader
