"""The primitives, one module per family; importing this package registers every one of them
in the op registry's tables (compiler/opdefs.py). The language's front ends
(compiler/functions.py) import it first: a function named after a primitive is its front end.
"""

# The imports run in registration order (isort would reorder them).
# isort: off
from . import elementwise, layout, leaf, linalg, norm, reduce, special, window  # noqa: F401
from . import activations, math_ops, logic  # noqa: F401  (after special: gelu calls dlc_erf)
from . import integers  # noqa: F401
from . import modes, random, batch_norm  # noqa: F401  (training/eval, random, model state)
from . import attention  # noqa: F401

# isort: on
from . import kv_cache  # noqa: F401  (after attention: the decode pass's cache ops)
