"""Loading of the optional C speed-ups, in one place (aiokafka's pattern).

Each speed-up has a pure-Python reference that gives the same results; the extension is used
when it is built unless ``STORAGECORE_NO_EXTENSIONS`` is set to anything but ``""`` or ``"0"``.
The choice is made once, at import of the module that uses it; the test suite runs the unit
tests both ways and asserts which implementation each module loaded.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

DISABLE_VARIABLE = "STORAGECORE_NO_EXTENSIONS"


def load_extension(name: str) -> ModuleType | None:
    """The extension module ``name``, or None when it is disabled or not built."""
    if os.environ.get(DISABLE_VARIABLE, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
