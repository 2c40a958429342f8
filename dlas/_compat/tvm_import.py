"""Import TVM without the failed lookups that cost every dlas process about a second.

Why: `import tvm` (0.2x wheels) probes for things that are not there, and catches the
errors: `tvm.runtime` imports `disco` before `libtvm_runtime_extra` (which holds disco's
types) is loaded, so the import always fails there; and each backend's
`register_script_namespace` asks `Op.get` for intrinsics this build lacks (112 misses in
all on this wheel). Every miss is a C++ error, and the first error of a process makes
libbacktrace read the symbol and debug tables of every loaded library (libpython's DWARF,
libtorch_cpu's symbols). On a 2-vCPU Zen 3 (2026-12-01) that was 1.2-1.6 s of a 3.4-4.8 s
`import tvm` (measured by replacing the backtrace with an empty one). A quickstart starts
a dozen processes that import TVM (the run, compile helpers, timing workers), and the
test suite many more.

What this does, only while the `tvm` package itself is being imported, and only when dlas
is imported before TVM (`dlas/__init__.py` calls :func:`install`):
- `tvm.runtime.disco` fails at once with an ImportError while its library is not loaded
  yet, as the import would have failed anyway (TVM sets `tvm.runtime.disco = None`
  either way; `import tvm.runtime.disco` afterwards works as before);
- `Op.get` looks the name up in the registered op names first, and raises a plain
  ValueError for a name that is not there (TVM's callers there catch any exception);
- the garbage collector is paused (the import builds objects, not cycles: 0.3-0.5 s of
  collections here).
Afterwards `Op.get` is TVM's own again. `tests/test_tvm_import.py` checks that the
result is the same: the same ops carry the same printer names, disco imports later.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


@dataclasses.dataclass
class ProbeCounts:
    """What the wrapper answered in this process (a test checks it still does anything)."""

    wrapped: bool = False
    disco_refused: int = 0
    misses_answered: int = 0
    registrations_answered: int = 0
    #: Times the whole op list was converted (`_QuietProbes._refresh`): a few, not one
    #: per new op.
    op_list_reads: int = 0


#: This process's counts.
COUNTS = ProbeCounts()

#: The module whose `Op.get` the import's probes call.
OP_MODULE = "tvm.ir.op"
#: The op attribute the backends' probes register (TVMScript's printer names); other
#: registrations pass through untouched.
PRINTER_NAME = "TScriptPrinterName"
#: The sub-package `tvm.runtime` imports before disco's library is loaded.
DISCO = "tvm.runtime.disco"


class _AroundExec(importlib.abc.Loader):
    """A loader that runs `before`/`after` around another loader's `exec_module`.

    Everything else is the real loader's (`get_source`, `get_resource_reader`, ...), and
    once the module has run, its `__loader__` and `__spec__.loader` are the real loader
    again, as a plain import leaves them."""

    def __init__(self, real: importlib.abc.Loader, before: Callable[[ModuleType], Any],
                 after: Callable[[ModuleType, Any], None]) -> None:
        self.real, self.before, self.after = real, before, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        state = self.before(module)
        try:
            self.real.exec_module(module)
        finally:
            module.__loader__ = self.real
            if module.__spec__ is not None:
                module.__spec__.loader = self.real
            self.after(module, state)


class _QuietProbes:
    """`Op.get` and `RegisterOpAttr` that answer the import's probes without C++ errors.

    - `Op.get` of a name TVM has not registered raises a ValueError (TVM's own error
      would say the same, after building a backtrace);
    - registering a printer name again at the level this import already registered it
      raises a ValueError: TVM refuses the same level twice ("already registered with
      same plevel");
    - registering a string (a printer name) an op already holds is skipped: TVM would
      keep the value, or refuse it at the same level (the CUDA backend names
      `tirx.s_tir.ldg32`, which holds its printer name already).
    """

    def __init__(self, op_class: type, original_get: Any, ffi_api: ModuleType) -> None:
        self.op_class, self.original_get, self.ffi_api = op_class, original_get, ffi_api
        self.real_get: Callable[[str], Any] = (
            original_get.__func__ if isinstance(original_get, staticmethod) else original_get)
        self.real_register: Callable[..., Any] = ffi_api.RegisterOpAttr
        self.names: set[str] = set()
        self.count = -1
        self.registered: set[tuple[str, str, int]] = set()

    def install(self) -> None:
        self.op_class.get = staticmethod(self.get)  # type: ignore[attr-defined]
        self.ffi_api.RegisterOpAttr = self.register  # type: ignore[attr-defined]

    def restore(self) -> None:
        self.op_class.get = self.original_get  # type: ignore[attr-defined]
        self.ffi_api.RegisterOpAttr = self.real_register  # type: ignore[attr-defined]

    def _refresh(self) -> None:
        # Converting the list costs one FFI call per name (about 800): refreshed only for a
        # name not seen yet, and op names registered through `register` are added there.
        # Refreshed on every new op, the CUDA backend's PTX table (it creates each op by
        # registering an attribute, then registers its printer name) read the list 507
        # times per import: 1.0-1.4 s of a Zen 3's 1.3-1.8 s `import tvm` (2026-12-01).
        names = self.op_class.list_op_names()  # type: ignore[attr-defined]
        if len(names) != self.count:  # ops registered since the last look
            COUNTS.op_list_reads += 1
            self.names = {str(name) for name in names}
            self.count = len(names)

    def get(self, op_name: str) -> Any:
        if op_name not in self.names:
            self._refresh()
            if op_name not in self.names:
                COUNTS.misses_answered += 1
                raise ValueError(f"operator {op_name} is not registered (checked by dlas "
                                 "while TVM imports; see dlas/_compat/tvm_import.py)")
        return self.real_get(op_name)

    def register(self, op_name: Any, attr_key: Any, value: Any, level: Any) -> Any:
        if str(attr_key) != PRINTER_NAME or not isinstance(value, str):
            result = self.real_register(op_name, attr_key, value, level)  # not a probe's
            # Registering an attribute registers its op (the PTX table creates its ops
            # so): known now, without reading the whole op list again (see `_refresh`).
            self.names.add(str(op_name))
            return result
        key = (str(op_name), str(attr_key), int(level))
        if key in self.registered:
            COUNTS.registrations_answered += 1
            raise ValueError(f"attribute {attr_key} of {op_name} is already registered "
                             f"with the same level {level} (checked by dlas while TVM "
                             "imports)")
        if str(op_name) not in self.names:
            self._refresh()
        if str(op_name) in self.names:
            current = self.real_get(str(op_name)).get_attr(str(attr_key))
            if isinstance(current, str) and str(current) == value:
                COUNTS.registrations_answered += 1
                return value  # holds this value already: TVM's call changes nothing seen
        result = self.real_register(op_name, attr_key, value, level)
        self.registered.add(key)
        return result


class _TvmImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the `tvm` package's import (once), and within it disco's and `tvm.ir.op`'s."""

    def __init__(self) -> None:
        self.importing = False
        self.patched: _QuietProbes | None = None

    def _real_spec(self, name: str, path: Sequence[str] | None,
                   target: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                return spec
        return None

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name == "tvm" and not self.importing:
            return self._wrapped(name, path, target, self._start, self._finish)
        if not self.importing:
            return None
        if name == DISCO and not _disco_library_loaded():
            COUNTS.disco_refused += 1
            raise ImportError(f"{DISCO}: libtvm_runtime_extra is not loaded yet "
                              "(dlas/_compat/tvm_import.py)")
        if name == OP_MODULE:
            return self._wrapped(name, path, target, lambda module: None, self._patch_op)
        return None

    def _wrapped(self, name: str, path: Sequence[str] | None, target: ModuleType | None,
                 before: Callable[[ModuleType], Any],
                 after: Callable[[ModuleType, Any], None]
                 ) -> importlib.machinery.ModuleSpec | None:
        spec = self._real_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _AroundExec(spec.loader, before, after)  # type: ignore[arg-type]
        return spec

    def _start(self, module: ModuleType) -> bool:
        self.importing = True
        COUNTS.wrapped = True
        was_enabled = gc.isenabled()
        gc.disable()
        return was_enabled

    def _finish(self, module: ModuleType, gc_was_enabled: bool) -> None:
        if self.patched is not None:
            self.patched.restore()
            self.patched = None
        self.importing = False
        if gc_was_enabled:
            gc.enable()
        uninstall()

    def _patch_op(self, module: ModuleType, state: None) -> None:
        op_class = getattr(module, "Op", None)
        original = getattr(op_class, "__dict__", {}).get("get")
        ffi_api = getattr(module, "_ffi_api", None)
        if (op_class is None or original is None or not hasattr(op_class, "list_op_names")
                or not hasattr(ffi_api, "RegisterOpAttr")):
            return  # another TVM: leave it as it is
        self.patched = _QuietProbes(op_class, original, ffi_api)
        self.patched.install()


def _disco_library_loaded() -> bool:
    base = sys.modules.get("tvm.base")
    return "tvm_runtime_extra" in getattr(base, "_LOADED_LIBS", {})


def install() -> None:
    """Wrap the coming `import tvm` (nothing where TVM is imported already)."""
    if "tvm" in sys.modules or any(isinstance(f, _TvmImportFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _TvmImportFinder())


def uninstall() -> None:
    """Remove the wrapper (after TVM's import, or for a test's plain import)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TvmImportFinder)]
