"""The built-in cost model: seconds per stage from model size and budgets.

Used where the workspace has measured nothing similar, and as the *shape* by which a
measured entry is rescaled to another model or budget (measured seconds x built-in cost
of the new entry / built-in cost of the measured one). Each stage's cost is split into
components, so a measured compile's compile part and tuning part rescale separately
(the first with the conv count, the second with the trials).

The constants were fitted on this project's machine class (2-core AMD EPYC VMs, Zen 3
and Zen 5 seen; 2 threads) from the quickstart sweep's measured stage seconds (ResNet18
and MobileNetV2 at width 0.5: 139M / 24M MACs, 20 / 57 convs; digits, 1437 training
images) and the tuning costs in DESIGN.md. They are meant to be right within a factor
of about 2; a workspace's own measurements replace them wherever a similar stage ran.
"""

from __future__ import annotations

from dlas.estimate.work import StageWork

# --- data: loading a dataset (not cached; every run loads it once) ----------------------
#: digits: 0.3-0.5 s measured; CIFAR-10 unpickles 60,000 images (a few seconds).
DATA_S: dict[str, float] = {"digits": 0.5, "cifar10": 5.0, "imagenet": 30.0}
DATA_DEFAULT_S = 5.0

# --- training and fine-tuning: SGD over images x epochs ---------------------------------
#: Seconds per training image per conv layer (framework work per layer: depthwise and
#: 1x1 convs, batch norm, activations) and per MAC of the forward pass (forward and
#: backward of the big convs). Fitted to 4 epochs of digits: ResNet18-w0.5 53 s,
#: MobileNetV2-w0.5 49 s (batch 64, channels-last). CIFAR ResNet18 (555M MACs) comes
#: out at about 23 minutes per epoch, 76 hours for the paper's 200 epochs.
TRAIN_S_PER_CONV_IMAGE = 1.21e-4
TRAIN_S_PER_MAC_IMAGE = 4.51e-11
#: The per-conv term at CIFAR's 32x32 is part per-layer overhead (launches, autograd) and
#: part memory-bound work over the activations (batch norm, ReLU: 36% and 8% of a
#: MobileNetV2 step on Zen 3), which shrinks with the image. The share that does not, from
#: four 16x16 quickstarts in float32 (Zen 4, 2026-11-29/30, stage seconds against this
#: model at the probes' scales): 4 epochs took ResNet18-w0.5 9.7-11.9 s and MobileNetV2-w0.5
#: 6.5-7.5 s, fine-tuning 7.4-9.8 and 5.4-7.6 s. With 0.6 kept (fitted the day before on
#: two runs whose MobileNetV2 took 10.7 s), MobileNetV2 read 1.86x over and the train and
#: compress stages 1.4x (median |log| 0.62); with 0.1, 0.96-1.17x (median 0.11). At a
#: batch of 64 a layer's own overhead is a small part of a step; 32x32 is unchanged.
CONV_FIXED_SHARE = 0.1
CIFAR_PIXELS = 32 * 32
#: An evaluation (forward only) costs about a third of a training step.
FORWARD_SHARE = 1 / 3
#: Model construction, optimizer and data loaders, saving.
TRAIN_FIXED_S = 3.0

# --- compress -----------------------------------------------------------------------------
#: Evaluating the compressed model and storing it (none, float16: 1.3-1.9 s measured).
COMPRESS_FIXED_S = 1.5
#: Per pruning level: pruning, masks, the level's evaluation beside the test pass. Three
#: 16x16 quickstarts on the Zen 4 (2026-11-30, scale 0.37) spent about 1 s beside their
#: fine-tuning epochs on a 2-level pruned model, where 3.0 read the compress stage
#: 1.3-1.45x over (19 s estimated, 13.1-14.7 measured).
PRUNE_LEVEL_S = 1.0
#: int8: ONNX export, ONNX Runtime static quantization (calibration) and its accuracy
#: (int8 4.5-7.3 s measured for ResNet18-w0.5).
INT8_EXTRA_S = 4.0

# --- import (torch.export, Relax frontend, reference outputs) ------------------------------
#: ResNet18-w0.5 (20 convs) 1.75 s, MobileNetV2-w0.5 (57 convs) 3.3 s.
IMPORT_FIXED_S = 0.9
IMPORT_S_PER_CONV = 0.042

# --- compile: lowering with the algorithm, folding, minimal schedules, LLVM ---------------
#: Dense algorithms 0.1 s per conv (ResNet18-w0.5 1.9-3.8 s, MobileNetV2-w0.5 4.5-7 s);
#: CSR ones 0.22 s per conv (4.6-6.2 s and 11.5-13.8 s).
COMPILE_FIXED_S = 0.5
COMPILE_S_PER_CONV = 0.10
COMPILE_S_PER_CSR_CONV = 0.22
#: Per-conv stretch of an int8 model (quantize/requantize around each conv), of an
#: NHWC/NCHWc layout (register-tiled micro-kernels, layout transforms), and of both at
#: once (the int8 dot-product kernels, replacing the layout's stretch). Zen 5, ResNet18,
#: MobileNetV2 and VGG-16 at width 0.5, s per untuned compile: fp32 NCHW 1.0 / 2.3 / 1.0,
#: fp32 NCHWc 1.4 / 2.6 / 1.1, int8 NCHW 1.5 / 2.5 / 1.2, int8 NCHWc 2.9 / 4.3 / 1.9.
COMPILE_INT8_STRETCH = 1.2
COMPILE_LAYOUT_STRETCH = 1.2
COMPILE_INT8_LAYOUT_STRETCH = 2.3

#: An untuned compile whose kernels an earlier compile built (`dlas.compiler.kernel_objects`:
#: lowering, schedules, the VM program and the link, no LLVM codegen): of the compile
#: that builds them, `benchmarks/kernel_reuse.py` on a Zen 4 (ResNet18-w0.5 and
#: MobileNetV2-w0.5 at 16x16, three dense algorithms in NCHW and NCHWc, three pruning
#: levels): median 0.27, 0.20-0.38 over 36 compiles. A ratio of two compiles on one core.
KERNELS_REUSED_SHARE = 0.3

# --- tuning (MetaSchedule) --------------------------------------------------------------
#: Seconds per budgeted trial in dlas's pooled session at serial scale 1 (builds
#: overlapped with runs; early stopping spends fewer trials than budgeted): a build and a
#: run, plus the evolutionary search's share, which grows with the candidates it scores
#: per measured trial (population / trials per round). Both are serial work and scale with
#: the core (`serial_scale`). Fitted on two ends:
#:   the quickstart's tuned point (population 64, 32 per round: 2 per trial): 64 trials in
#:   21 s after its fixed part on a Zen 4 at scale 0.37-0.45 (0.83-0.89 s a trial at
#:   scale 1; the Zen 3's 70-74 s for the same point fit it at a scale of about 1,
#:   inferred from its serial stages: its probe was not read there);
#:   the `day` profile (MetaSchedule's 512 and 64: 8 per trial): 0.85 s per budgeted trial
#:   on a Zen 5 at scale 0.41 (2.07 s at scale 1; 0.7 s a trial for direct and GEMM, 1.3 s
#:   spatial pack, 2.9 s CSR spatial pack).
#: One constant per trial, unscaled (1.0 s), read the quickstart's point 2.3x over on the
#: Zen 4; scaled, it read the `day` profile 1.75x under on the Zen 5.
TRIAL_BUILD_S = 0.47
TRIAL_SEARCH_S = 0.2
#: A session's builder pool, task extraction, minimal and transferred candidates (7.5-7.7 s
#: of measuring the minimal schedules of 15 tasks on the Zen 4, 2026-11-30: builds, but
#: mostly timing; 8.8 s before a session under 100 trials stopped importing and training
#: XGBoost, `dlas.tuning.metaschedule.cost_model`).
TUNING_FIXED_S = 8.0

# --- measure and baselines: verify, then time ----------------------------------------------
#: Untuned thread-parallel TVM code on 2 threads runs about 10 GMAC/s (ResNet18-w0.5:
#: 151 runs in 1.3-3 s; MobileNetV2-w0.5 in 0.35-0.66 s); int8 code about half that.
MACS_PER_S = 1.0e10
INT8_SLOWDOWN = 2.0
#: Per variant: its share of the timing worker's start, loading and verifying the module,
#: and its chunks' warm-up calls, settle pauses and placement probes over about ten rounds
#: (docs/timing.md). Mostly waiting (pauses, probes' fixed rounds), so a faster core does
#: not shorten it. 1.0 (a worker's start was about 5 s per model's group of a dozen
#: variants) read the timing of three 16x16 quickstarts on the Zen 4 (2026-11-30) at 62 s
#: for 32-58 s measured, once a spare worker imported beside the first
#: (`dlas.runner.worker_starts`) and ONNX Runtime's export took 0.2 s instead of 2-4; the
#: 32 s run had every round near, the others waited for near placement. Plus 0.05: each
#: chunk's 10 ms of warm-up calls (`dlas.measure.stopping.WARMUP_S`, about five chunks a
#: pass), which took a Zen 3's three passes from 60 s to 65 s.
MEASURE_FIXED_S = 0.8
#: Of an untuned compile's seconds, the share its run's compile helpers take off the wall
#: clock when every spare core has one (`dlas.runner.compile_ahead`: they compile the
#: model's other points while the run compiles its own): with one helper, pass 1 of two
#: 16x16 quickstarts on a Zen 4 ran 17-18 s under the sum of its stages, 39% of the
#: untuned compiles' 44-45 s, of the 50% one helper could take.
HELPER_OVERLAP = 0.75
#: A timing pass after the first costs this share of the first: the first verifies every
#: variant in full (its verify samples, the accuracy beside it) and records it; later
#: passes re-check one input (`dlas.stages.timed.reverify`) and time. Passes 2 and 3 over
#: pass 1's timing: Zen 3 0.41-0.46 (32x32 digits), Zen 4 0.40-0.48 (32x32) and 0.43-0.83
#: (16x16, five quickstarts, most near 0.45).
LATER_PASS_SHARE = 0.5


def pass_weights(passes: int) -> tuple[float, ...]:
    """Each timing pass's cost as a share of the first's, in the built-in cost: 1 for the
    first, `LATER_PASS_SHARE` for each later one (what a run's projection credits each
    pass with, `dlas.runner.eta`)."""
    return (1.0,) + (LATER_PASS_SHARE,) * (max(passes, 1) - 1)

#: Per component, the layers whose options a measured entry must share to stand for
#: another, most telling first; an entry that does not share the first is not used.
SIGNATURE: dict[str, tuple[str, ...]] = {
    "data": ("datasets",),
    "train": ("models", "datasets"),
    "compress": ("compression", "models", "datasets"),
    "import": ("compression", "models"),
    "compile": ("algorithms", "compression", "models", "targets"),
    "tuning": ("tuning", "targets", "algorithms", "models"),
    "measure": ("targets", "compression", "algorithms", "models"),
    "baseline": ("tuning", "compression", "models"),
}


def _per_image(work: StageWork, mac_scale: float = 1.0, serial_scale: float = 1.0,
               bf16_speedup: float = 1.0) -> float:
    """Seconds of one training step on one image; `mac_scale` stretches the per-MAC term
    for a machine slower at it than the fitted ones, `serial_scale` the per-layer
    framework work (`dlas.estimate.machine_speed`). A bfloat16 fit divides both by
    `bf16_speedup`: the constants were fitted in float32, and bf16 autocast sped the
    per-layer work as much as the big convs' (a step of MobileNetV2-w0.5, mostly per-layer
    work in this model, 1.73x; of ResNet18-w0.5, mostly MACs, 1.48x: Zen 4)."""
    activations = CONV_FIXED_SHARE + (1 - CONV_FIXED_SHARE) * work.input_pixels / CIFAR_PIXELS
    step = (TRAIN_S_PER_CONV_IMAGE * work.convs * activations * serial_scale
            + TRAIN_S_PER_MAC_IMAGE * work.macs * mac_scale)
    return step / bf16_speedup if work.fit_precision == "bfloat16" else step


def _latency(work: StageWork) -> float:
    return work.macs / MACS_PER_S * (INT8_SLOWDOWN if work.int8 else 1.0)


def components(work: StageWork, mac_scale: float = 1.0, serial_scale: float = 1.0,
               bf16_speedup: float = 1.0) -> dict[str, float]:
    """The built-in estimate of `work`, in seconds per component (they sum to the stage);
    `mac_scale`: this machine's training MAC cost over the fitted one; `serial_scale`:
    its serial work's, everything else; `bf16_speedup`: how many times faster a training
    step runs here in bfloat16 than in float32 (`dlas.estimate.machine_speed`)."""
    per_image = _per_image(work, mac_scale, serial_scale, bf16_speedup)
    evaluate = work.test_images * per_image * FORWARD_SHARE
    if work.stage == "train":
        fit = work.train_images * work.epochs * per_image
        return {"train": TRAIN_FIXED_S * serial_scale + fit + evaluate}
    if work.stage == "compress":
        finetune = work.train_images * work.epochs * per_image
        fixed = (COMPRESS_FIXED_S + work.levels * PRUNE_LEVEL_S
                 + (INT8_EXTRA_S if work.int8 else 0)) * serial_scale
        return {"compress": fixed + evaluate + finetune + work.levels * evaluate}
    if work.stage in ("measure", "baseline"):  # a timing variant: its fixed part waits,
        # its runs compute. A baseline's session costs what a TVM variant's module does
        # since ONNX Runtime's export is TorchScript's (0.1-0.25 s; dynamo's took 2-4 s,
        # and this was a 2.5 s constant of its own, scaled)
        latency = _latency(work) if work.stage == "measure" else work.macs / MACS_PER_S
        return {work.stage: MEASURE_FIXED_S + work.runs * latency * serial_scale}
    parts = {part: seconds * serial_scale for part, seconds in _serial(work).items()}
    if work.stage == "compile":  # its fixed part is mostly timing the minimal candidates
        parts["tuning"] = _tuning(work, serial_scale)
    return parts


def helper_factor(helpers: int) -> float:
    """What an untuned compile costs the run's wall clock with `helpers` compile helpers
    (1.0 with none)."""
    return 1.0 - HELPER_OVERLAP * (1.0 - 1.0 / (1 + max(helpers, 0)))


def _tuning(work: StageWork, serial_scale: float = 1.0) -> float:
    """A tuned compile's search: the session's fixed start, then each budgeted trial's
    build, run and search share at this core's speed."""
    if not work.trials:
        return 0.0
    trial = TRIAL_BUILD_S + TRIAL_SEARCH_S * work.search_per_trial
    return TUNING_FIXED_S + trial * work.trials * serial_scale


def _compile_per_conv(work: StageWork) -> float:
    if work.csr:
        return COMPILE_S_PER_CSR_CONV
    if work.int8:
        stretch = COMPILE_INT8_LAYOUT_STRETCH if work.vector_layout else COMPILE_INT8_STRETCH
    else:
        stretch = COMPILE_LAYOUT_STRETCH if work.vector_layout else 1.0
    return COMPILE_S_PER_CONV * stretch


def _serial(work: StageWork) -> dict[str, float]:
    """The stages with no training in them, as fitted."""
    if work.stage == "data":
        return {"data": DATA_S.get(work.options.get("datasets", ""), DATA_DEFAULT_S)}
    if work.stage == "import":
        return {"import": IMPORT_FIXED_S + IMPORT_S_PER_CONV * work.convs}
    if work.stage == "compile":
        compile_s = COMPILE_FIXED_S + _compile_per_conv(work) * work.convs
        return {"compile": compile_s * (KERNELS_REUSED_SHARE if work.kernels_reused else 1.0),
                "tuning": _tuning(work)}
    raise ValueError(f"no cost model for stage '{work.stage}'")
