"""The stages of one sweep point and the keys that address their outputs.

data -> train -> compress -> import (to TVM Relax, with the PyTorch reference outputs)
-> compile (algorithm + tuning + target) -> measure (verify, then time) -> record.
A baseline point (PyTorch, ONNX Runtime) replaces compile and measure with one `baseline`
stage: run the compressed model in that runtime, verify it, time it.

Each key hashes exactly the inputs that stage's output depends on: the upstream key, the
option (name, version, params) and the budgets it reads. Shared prefixes of points hence
share keys, so one trained model feeds every compression, one compressed model every
algorithm and target.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from dlas import registry
from dlas.results.environment import machine_fingerprint
from dlas.sweep.grid import Choice, Point, canonical_json, digest
from dlas.targets.base import TargetSpec

STAGES = ("data", "train", "compress", "import", "compile", "measure", "baseline")

#: Bump a stage's version when its own code changes what it produces.
#: compress 2: precision/deployment (int8 ONNX), accuracy None when unavailable or measured
#: later; import 2: float16/int8 imports, ONNX Runtime reference; import 3: convs outside
#: the deployed precision noted; compile 2: constants folded in numpy (same values), the
#: phases' seconds and the fold report in its meta; measure 2: per-precision verification,
#: agreement with float32, accuracy of reduced-precision compiled models; baseline 2:
#: accuracy of a reduced-precision baseline measured in its own runtime, always. (int8's change of
#: verification reference to the literal QDQ function came with its key facts, which
#: changed every int8 compress key and hence everything downstream of it.)
STAGE_VERSIONS = {"data": 1, "train": 1, "compress": 2, "import": 4, "compile": 2, "measure": 2,
                  "baseline": 2}

#: Model-option tag: the option returns a ready (pretrained) model that is not trained.
PRETRAINED_TAG = "pretrained"


def is_pretrained(point: Point) -> bool:
    return PRETRAINED_TAG in point.models.tags


def pretrained_weights(point: Point) -> Any:
    """The weights file a pretrained model option would load (path, size, mtime), or None.

    Part of the train key: the option's parameters alone do not say whether torchvision's
    checkpoint has appeared in the hub cache since, and a random-init model cached before
    must not be served once the real weights are there.
    """
    from dlas.models.imagenet import ARCHITECTURES, weights_identity

    if point.models.name not in ARCHITECTURES:
        return None
    return weights_identity(point.models.name, getattr(point.models.params, "weights", None))


@functools.cache
def _resolve_target_cached(name: str, version: str, params_json: str) -> TargetSpec:
    option = registry.get("targets", name)
    return option.fn(option.parse_params(json.loads(params_json)))


def resolve_target(point: Point) -> TargetSpec:
    """The target's concrete spec (host detection runs once per process)."""
    choice = point.targets
    return _resolve_target_cached(
        choice.name, choice.option.version, canonical_json(choice.identity()["params"])
    )


@dataclass(frozen=True)
class StageKeys:
    data: str
    train: str
    compress: str
    import_: str
    compile: str
    measure: str
    #: Set for a baseline point, whose compile and measure keys are then "" (not run).
    baseline: str = ""

    def items(self) -> list[tuple[str, str]]:
        """The stages this point runs, with their keys."""
        pairs = zip(STAGES, (self.data, self.train, self.compress, self.import_,
                             self.compile, self.measure, self.baseline), strict=True)
        return [(stage, key) for stage, key in pairs if key]


def _key(stage: str, **inputs: Any) -> str:
    return digest({"stage": stage, "stage_version": STAGE_VERSIONS[stage], **inputs})


def option_facts(choice: Choice) -> dict[str, Any]:
    """`{"facts": ...}` for an option whose output depends on facts of this machine
    (`registry.Option.key_facts`), else nothing, so other options' keys are unchanged."""
    facts = choice.option.key_facts
    return {"facts": facts(choice.params)} if facts is not None else {}


def stage_keys(point: Point) -> StageKeys:
    b = point.budgets
    c = point.choices
    data = _key("data", dataset=c["datasets"].identity(), seed=b.seed)
    training = {"weights": pretrained_weights(point)} if is_pretrained(point) else {
        "epochs": b.epochs, "data_fraction": b.data_fraction, "batch_size": b.batch_size,
        "max_lr": b.max_lr}
    train = _key("train", data=data, model=c["models"].identity(), **training)
    compress = _key("compress", train=train, compression=c["compression"].identity(),
                    finetune_epochs=b.finetune_epochs, data_fraction=b.data_fraction,
                    batch_size=b.batch_size, finetune_lr=b.finetune_lr,
                    **option_facts(c["compression"]))
    import_ = _key("import", compress=compress, verify_samples=b.verify_samples)
    target = resolve_target(point)
    if point.is_baseline:  # the imported model's reference outputs, the runtime, timing
        baseline = _key("baseline", imported=import_, runtime=c["tuning"].identity(),
                        target=c["targets"].identity(), threads=target.num_threads,
                        repeat=b.measure_repeat, number=b.measure_number, warmup=b.warmup,
                        machine=machine_fingerprint(), hardware=target.fingerprint)
        return StageKeys(data, train, compress, import_, "", "", baseline)
    compile_ = _key("compile", imported=import_, algorithm=c["algorithms"].identity(),
                    tuning=c["tuning"].identity(), target=c["targets"].identity(),
                    tvm_target=target.tvm_target, tuning_trials=b.tuning_trials)
    measure = _key("measure", compiled=compile_, repeat=b.measure_repeat,
                   number=b.measure_number, warmup=b.warmup, threads=target.num_threads,
                   machine=machine_fingerprint(), hardware=target.fingerprint)
    return StageKeys(data, train, compress, import_, compile_, measure)
