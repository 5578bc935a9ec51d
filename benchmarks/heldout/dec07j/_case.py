"""The held-out cases' plumbing under the name the cases import: benchmarks/heldout/case_plumbing.py,
shared by every corpus (a case file puts its own folder on sys.path and imports ``_case``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from case_plumbing import *  # noqa: E402,F401,F403
from case_plumbing import __all__  # noqa: E402,F401
