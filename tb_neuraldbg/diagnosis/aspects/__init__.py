"""One file per aspect of the rows, each with its own state (Cockpit's
``quantities/`` habit): ``gradient``, ``activation``, ``weight``, ``input``,
``loss``, ``optimizer``, ``gain`` and ``units``, over the shared helpers of ``_base``. The
``Classifier`` (diagnosis/states.py) runs them in order at every step.
"""

from ._base import Aspect, RowKinds
from .activation import Activation
from .gain import Gain
from .gradient import Gradient
from .input import Input
from .loss import Loss
from .optimizer import Optimizer, Rate
from .samples import Samples
from .units import Units
from .weight import Weight

__all__ = ["Aspect", "RowKinds", "Gradient", "Activation", "Weight", "Input", "Loss", "Optimizer", "Rate", "Gain",
           "Units", "Samples"]
