"""How an untuned CUDA build of a model would occupy a GPU, read from its kernels on any
machine (no GPU needed): per conv kernel, the thread blocks it launches, the threads of
each, and the iterations a thread walks on its longest path of serial loops (`serial`);
beside the GPU's streaming multiprocessors (132 on an H100 or H200), that says which
kernels leave it idle.

    python benchmarks/gpu_kernels.py --model resnet18 --algorithm spatial_pack
    python benchmarks/gpu_kernels.py --model resnet18 --algorithm direct --schedules reduction

It is how the H200 check's finding was read (docs/gpu.md, the third check): dlight's tiled
implicit GEMM gave each batch-1 conv of ResNet18-w0.5 at 16x16 2-8 blocks, walking up to
144 reduction steps of 16; `schedules: reduction` gives the same convs 128-2048. It counts,
it does not time: a GPU's timings come from `scripts/gpu_check.sh`.
"""

from __future__ import annotations

import argparse
import re
import sys

#: A thread binding in TVMScript: `for v in T.thread_binding(T.int64(4), thread="blockIdx.y")`.
_BINDING = re.compile(r'in T\.thread_binding\((?:T\.int64\()?(\d+)\)?, thread="(\w+\.\w)"')
#: A serial loop: `for v in range(T.int64(144))` or `T.serial(...)`.
_SERIAL = re.compile(r"for .* in (?:range|T\.serial)\((?:T\.int64\()?(\d+)\)?\)")
#: Serial loops written as one: `for a, b in T.grid(T.int64(256), T.int64(9))`.
_GRID = re.compile(r"for .* in T\.grid\((.*)\):")


def occupancy(script: str) -> tuple[int, int, int]:
    """(blocks, threads per block, the longest product of serial loop extents on one
    loop path) of a scheduled PrimFunc's TVMScript."""
    extents: dict[str, int] = {}
    path: list[tuple[int, int]] = []  # (indent, extent) of the loops around a line
    longest = 1
    for line in script.splitlines():
        indent = len(line) - len(line.lstrip())
        while path and path[-1][0] >= indent:
            path.pop()
        bound = _BINDING.search(line)
        serial = _SERIAL.search(line)
        grid = _GRID.search(line)
        if bound:
            extents[bound.group(2)] = int(bound.group(1))
            path.append((indent, 1))
        elif serial or grid:
            extent = int(serial.group(1)) if serial else 1
            extents_text = re.sub(r"T\.int64\((\d+)\)", r"\1", grid.group(1) if grid else "")
            for number in re.findall(r"\b\d+\b", extents_text):
                extent *= int(number)
            path.append((indent, extent))
            product = 1
            for _, extent in path:
                product *= extent
            longest = max(longest, product)
        elif line.lstrip().startswith("for "):
            path.append((indent, 1))
    blocks = threads = 1
    for tag, extent in extents.items():
        if tag.startswith("blockIdx"):
            blocks *= extent
        elif tag.startswith("threadIdx"):
            threads *= extent
    return blocks, threads, longest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--width", type=float, default=0.5)
    parser.add_argument("--image-size", type=int, default=16)
    parser.add_argument("--algorithm", default="direct")
    parser.add_argument("--schedules", default="algorithm",
                        help="the cuda target's family: algorithm, bindings or reduction")
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()

    import tvm

    from dlas import registry
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.compiler.gpu_schedule import apply_gpu_schedules, conv_algorithm_of, untuned_rules
    from dlas.compiler.relax_import import import_torch_model

    size = args.image_size
    model = registry.create("models", args.model, {"width_multiplier": args.width},
                            num_classes=10, input_shape=(3, size, size)).eval()
    imported = import_torch_model(model, (1, 3, size, size))
    spec = registry.create("targets", "cuda", {"arch": args.arch, "schedules": args.schedules})
    target = make_target(spec.tvm_target)
    algorithm = registry.create("algorithms", args.algorithm, {})
    mod, _ = lower_to_tir(imported.mod, imported.params, algorithm, target)
    convs = {gv.name_hint for gv, f in mod.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc) and conv_algorithm_of(f)}
    rules = untuned_rules(args.schedules, (algorithm, algorithm.fallback()))
    scheduled, _ = apply_gpu_schedules(mod, target, rules=rules)
    print(f"{args.model}-w{args.width} at {size}x{size}, {args.algorithm}, "
          f"cuda(schedules={args.schedules}), {args.arch}: conv kernels")
    print(f"{'kernel':58} {'blocks':>7} {'threads':>8} {'serial':>7} shared")
    rows = []
    for gvar, func in scheduled.functions_items():
        if gvar.name_hint in convs:
            script = func.script()
            rows.append((gvar.name_hint, *occupancy(script), '"shared"' in script))
    for name, blocks, threads, serial, shared in sorted(rows, key=lambda r: r[1]):
        print(f"{name[:58]:58} {blocks:>7} {threads:>8} {serial:>7} {'yes' if shared else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
