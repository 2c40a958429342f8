"""One kernel object for every CPU compile whose kernels are the same.

A compiled model is two things: the kernels (TIR, built by LLVM into machine code) and
the Relax VM's program with its constant pool, where the weights live. A dense
algorithm's kernels take the weights as arguments, so the pruned and the unpruned model
of one architecture, or every level of a pruning study, compile to the same TIR, and
LLVM would build the same machine code for each. Building it is most of a compile's
`codegen` and `export` phases (three quarters of them for ResNet18-w0.5 on a Zen 4).

`build_cpu_executable` does what `tvm.relax.build` does, step by step, so that it can
key the TIR before building it: by each PrimFunc's structural hash, the target, the
PassContext and the TVM and LLVM builds (`kernel_key`). A workspace keeps the object
file LLVM emitted for a key (`KernelObjects`); a later compile with the same key builds
no kernels and links that object beside its own VM program and constants instead.

Linking changes no machine code, only the time: LLVM is deterministic, and two builds of
one TIR already gave byte-identical `.text` at the same addresses (ResNet18-w0.5,
`direct`, unpruned and pruned: 0x6764 bytes at 0x1050 in both libraries, and `.rodata`
of one size and place), which is also why a same-work pair cannot differ by code layout
(docs/timing.md, "The same work, read twice").

Only plain native libraries take part: a module with external (BYOC) libraries, a
system library, or code for another CPU (exported as a .tar, linked on the board) is
built by `tvm.compile` as before. Every variant is verified against the model's
reference after compiling either way, so a reused object that computed something else
would fail as any wrong variant does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.relax import _ffi_api as relax_ffi
from tvm.relax.vm_build import VMExecutable, _auto_attach_system_lib_prefix, _vmcodegen
from tvm.support import cc
from tvm.target import Target

from ..integrity import check_seal, remove_sealed, write_seal
from .codegen_config import cpu_codegen_context

#: The object a workspace keeps per kernel key, and the folder it keeps them in.
OBJECT_SUFFIX = ".o"
KERNELS_DIR = "kernels"
#: The one PrimFunc a reused executable is linked with: the VM needs a module of kind
#: llvm in the place the kernels' module takes, and the export swaps its object for
#: the kept one.
_PLACEHOLDER = "dlas_kernels_placeholder"


@dataclass(frozen=True)
class KernelObjects:
    """A folder of kernel objects, one per `kernel_key` (a workspace's `kernels/`)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def path(self, key: str) -> Path:
        return self.root / f"{key}{OBJECT_SUFFIX}"

    def find(self, key: str) -> Path | None:
        """The kept object of `key`, if it is what was kept: one that differs from its
        seal (or has none) is discarded, and its kernels are built again."""
        path = self.path(key)
        if not path.is_file():
            return None
        verdict = check_seal(path)
        if verdict.verified and verdict.intact:
            return path
        self.discard(key)
        return None

    def discard(self, key: str) -> None:
        remove_sealed(self.path(key))

    def keep(self, key: str, emitted: Path) -> None:
        """Store `emitted` under `key` with its seal, whole or not at all (helpers
        compile at once; the same key is the same code, whoever writes it last)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{key}.", suffix=".tmp")
        os.close(fd)
        try:
            shutil.copyfile(emitted, tmp)
            write_seal(Path(tmp), for_name=self.path(key))
            os.replace(tmp, self.path(key))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


class DamagedKernelObject(RuntimeError):
    """A kept kernel object the linker refused, or one gone or damaged between finding
    and linking it; it is discarded, and the compile that met it builds its kernels
    instead (`dlas.compiler.build.compile_model`)."""


@dataclass
class BuiltExecutable:
    """A VM executable and how its kernels came: `key` None when they cannot be kept
    (see the module docstring), `reused` when they are a kept object's."""

    executable: VMExecutable
    key: str | None = None
    reused: bool = False
    objects: KernelObjects | None = None

    def export(self, path: Path) -> None:
        """`export_library` to `path`, linking the kept object in place of the
        placeholder's (reused), or keeping the kernels' object for later (built)."""
        if self.key is None or self.objects is None:
            self.executable.export_library(str(path))
            return
        key, objects = self.key, self.objects
        if self.reused:
            kept = objects.find(key)
            if kept is None:
                raise DamagedKernelObject(f"{objects.path(key)}: gone or damaged since the "
                                          "compile found it")

            def link(output: str, files: Sequence[str], **kwargs: object) -> None:
                try:
                    cc.create_shared(output, _swapped(files, kept), **kwargs)
                except RuntimeError as err:  # the linker's complaint
                    objects.discard(key)
                    raise DamagedKernelObject(f"{kept}: {err}") from err
        else:
            def link(output: str, files: Sequence[str], **kwargs: object) -> None:
                objects.keep(key, Path(_kernels_object(files)))
                cc.create_shared(output, list(files), **kwargs)
        self.executable.export_library(str(path), fcompile=_as_fcompile(link))


def kernel_key(tir_mod: tvm.IRModule, target: Target,
               context: tvm.transform.PassContext) -> str:
    """What the kernels' machine code depends on: every PrimFunc (by name and structural
    hash), the target, the PassContext they are built in (`context`: its opt level,
    config and required and disabled passes), and the TVM, its FFI and LLVM."""
    funcs = {gvar.name_hint: str(tvm_ffi.structural_hash(func))
             for gvar, func in tir_mod.functions_items()}
    info = tvm.support.libinfo()
    identity = {
        "funcs": dict(sorted(funcs.items())),
        "module": str(tvm_ffi.structural_hash(tir_mod)),
        "target": str(target),
        "pass_context": {"opt_level": int(context.opt_level),
                         "config": {str(k): str(v) for k, v in context.config.items()},
                         "required": sorted(map(str, context.required_pass)),
                         "disabled": sorted(map(str, context.disabled_pass))},
        "tvm": tvm.__version__, "tvm_ffi": tvm_ffi.__version__,
        "llvm": info.get("LLVM_VERSION", ""), "git": info.get("GIT_COMMIT_HASH", ""),
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def build_cpu_executable(mod: tvm.IRModule, target: Target,
                         relax_pipeline: tvm.transform.Pass,
                         objects: KernelObjects | None,
                         pass_config: dict | None = None) -> BuiltExecutable:
    """`tvm.compile(mod, target, relax_pipeline=...)` for a CPU, in the PassContext of
    `cpu_codegen_context(pass_config)`, building the kernels only when `objects` keeps
    none for their key."""
    with cpu_codegen_context(pass_config) as context:
        if objects is None:
            return BuiltExecutable(tvm.compile(mod, target=target, relax_pipeline=relax_pipeline))
        with target:
            mod = relax_pipeline(mod)
        attrs = mod.attrs
        if attrs is not None and attrs.get("external_mods"):
            return BuiltExecutable(relax.build(mod, target=target, relax_pipeline=None))
        params = dict(attrs.get("const_name_to_constant", {})) if attrs is not None else {}
        builder = relax.ExecBuilder()
        mod = _vmcodegen(builder, mod, "bytecode")
        prim = {gv: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
        if not prim:
            return BuiltExecutable(_link(builder, target, None, params))
        tir_mod = _auto_attach_system_lib_prefix(tvm.IRModule(prim, attrs=mod.attrs), target)
        if tir_mod.get_attr("system_lib_prefix") is not None:  # linked into a runtime
            return BuiltExecutable(_link(builder, target, tvm.tirx.build(tir_mod, target=target),
                                         params))
        key = kernel_key(tir_mod, target, context)
        reused = objects.find(key) is not None
        lib = tvm.tirx.build(_placeholder() if reused else tir_mod, target=target)
        return BuiltExecutable(_link(builder, target, lib, params), key, reused, objects)


def _link(builder: relax.ExecBuilder, target: Target, lib: tvm.runtime.Module | None,
          params: dict) -> VMExecutable:
    """The VM program, its constants and the kernels' module in one executable
    (`tvm.relax.vm_build._vmlink`, which would build the kernels itself)."""
    return VMExecutable(relax_ffi.VMLink(builder, target, lib, [], params))


def _placeholder() -> tvm.IRModule:
    func = tirx.PrimFunc([], tirx.Evaluate(0)).with_attr("global_symbol", _PLACEHOLDER)
    return tvm.IRModule({_PLACEHOLDER: func})


def _kernels_object(files: Sequence[str]) -> str:
    """The object `export_library` emitted for the kernels' module (`lib0.o`); the other
    file it links is the packed VM program and constants (`devc.o`)."""
    libs = [f for f in files if os.path.basename(f).startswith("lib") and f.endswith(".o")]
    if len(libs) != 1:
        raise RuntimeError(f"expected one kernel object among {list(files)}")
    return libs[0]


def _swapped(files: Sequence[str], kept: Path) -> list[str]:
    placeholder = _kernels_object(files)
    return [str(kept) if f == placeholder else f for f in files]


def _as_fcompile(link: Callable[..., None]) -> Callable[..., None]:
    """`export_library` reads the output format from its fcompile (a shared library)."""
    link.output_format = "so"  # type: ignore[attr-defined]
    return link
