"""dlas: across-stack studies of deep-learning inference (after the DLAS paper)."""

from dlas._compat import tvm_import as _tvm_import

__version__ = "0.1.0"

# TVM's own import probes for things this build lacks; each miss costs libbacktrace's
# tables (about a second a process): see dlas/_compat/tvm_import.py.
_tvm_import.install()
