"""Import python-gdcm safely before pydicom looks for it.

``gdcm.py`` runs ``import dl`` and, when that succeeds, calls ``dl.RTLD_NOW``. Python 3 has no
``dl`` module, so normally the import fails and gdcm carries on; but a folder named ``dl`` anywhere
on ``sys.path`` (the working directory counts) imports as an empty namespace package, the attribute
lookup raises ``AttributeError`` and, because pydicom only catches ``ImportError``,
``import pydicom`` itself crashes. Importing gdcm here first with ``dl`` masked avoids that.

Second trap: the gdcm wheel ships its own zlib (``libgdcmzlib``) exporting the same symbols as the
system ``libz.so.1``, which it also loads (through its bundled OpenSSL). When Python's ``zlib``
module is first imported *after* gdcm, ``libz.so.1``'s internal calls are bound to gdcm's copy and
the next raw deflate (pydicom writing Deflated Explicit VR Little Endian, ``zlib.compressobj``)
aborts the process with "double free or corruption". Importing ``zlib`` before gdcm binds
``libz.so.1`` to itself; every process must do so, which importing this package guarantees.
"""

from __future__ import annotations

import importlib
import sys
import zlib  # noqa: F401 - must be loaded before gdcm, see the module docstring

_MISSING = object()


def import_gdcm_safely() -> bool:
    """Import gdcm with any stray ``dl`` module hidden; return whether gdcm is usable."""
    if "gdcm" in sys.modules:
        return sys.modules["gdcm"] is not None
    saved = sys.modules.get("dl", _MISSING)
    sys.modules["dl"] = None  # makes `import dl` raise ImportError inside gdcm.py
    try:
        importlib.import_module("gdcm")
        return True
    except Exception:  # noqa: BLE001 - any failure only means the gdcm plugin is unavailable
        # a None entry makes pydicom's own `import gdcm` raise ImportError, which it handles
        sys.modules["gdcm"] = None  # type: ignore[assignment]
        return False
    finally:
        if saved is _MISSING:
            sys.modules.pop("dl", None)
        else:
            sys.modules["dl"] = saved


GDCM_AVAILABLE = import_gdcm_safely()
