"""The compression options dlas ships (layer 3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlas.registry import PRUNING_TAG, NoParams, UnknownOptionError, register
from dlas.registry import get as get_option

if TYPE_CHECKING:
    from torch import nn

    from dlas.compression.base import CompressionContext, CompressionResult


@register("compression", "none", version="2",
          description="the dense trained model, unchanged")
def no_compression(params: NoParams, model: nn.Module,
                   ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult

    # v2: records its ratio, so dense rows carry 1.0 like every other compression's own
    return CompressionResult(model, {"compression_ratio": 1.0})


#: The paper's schedules (Section 4.2): weight pruning from 50% in 10% steps, then 95% and
#: 99%; channel pruning from 5% in 5% steps, then 99%.
PAPER_WEIGHT_LEVELS = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]
PAPER_CHANNEL_LEVELS = [round(0.05 * k, 2) for k in range(1, 20)] + [0.99]


def _check_levels(levels: list[float], name: str = "levels") -> None:
    if not levels or any(not 0 < s < 1 for s in levels):
        raise ValueError(f"{name} must be non-empty levels in (0, 1)")
    if any(b <= a for a, b in zip(levels, levels[1:], strict=False)):
        raise ValueError(f"{name} must increase strictly, got {levels}")


class PruningParams(BaseModel):
    """Iterative pruning with fine-tuning between levels; which level is used."""

    model_config = ConfigDict(extra="forbid")
    levels: list[float] = Field(
        description="pruning levels in schedule order; the fine-tuning epochs "
                    "(budgets.finetune_epochs) are split evenly over them")
    max_drop: float = Field(
        0.01, ge=0, lt=1,
        description="elbow: the highest level whose accuracy (and every lower level's) "
                    "stays within this drop of the dense model, as a fraction "
                    "(0.01 = 1 percentage point)")
    level: float | None = Field(
        None, gt=0, lt=1,
        description="use this level (one of `levels`) instead of the elbow; the schedule "
                    "still runs every level, for the accuracy curve, and with fewer "
                    "fine-tuning epochs than levels this level gets its epoch first")
    level_by_model: dict[str, float] = Field(
        {},
        description="per model option name, the level to use (one of `levels`); "
                    "overrides `level` and the elbow for those models")

    @model_validator(mode="after")
    def _levels_are_consistent(self) -> PruningParams:
        from dlas.compression.elbow import find_level

        _check_levels(self.levels)
        for name in self.level_by_model:  # a misspelt model would silently get the elbow
            try:
                get_option("models", name)
            except UnknownOptionError as exc:
                raise ValueError(f"level_by_model: {exc}") from None
        fixed = dict(self.level_by_model)
        if self.level is not None:
            fixed["level"] = self.level
        for where, level in fixed.items():
            if find_level(self.levels, level) is None:
                label = "level" if where == "level" else f"level_by_model[{where!r}]"
                raise ValueError(f"{label}={level} is not one of levels {self.levels}")
        return self


#: How a pruning level is shared among convs.
Scope = Literal["global", "layer"]
SCOPE_DESCRIPTION = ("global: every conv's weights in one ranking (the paper's; layers end "
                     "up unequally sparse); layer: each conv ranked alone, so every conv is "
                     "pruned to the level (the setting of Elsen et al.'s sparse kernels)")


#: Which convs a weight-pruning option prunes (`dlas.compression.pruning.CONV_SELECTIONS`).
ConvSelection = Literal["all", "pointwise"]
CONVS_DESCRIPTION = ("all: every conv (the paper's); pointwise: only 1x1 ungrouped convs, "
                     "as Elsen et al.'s sparse MobileNets (depthwise and 3x3 convs stay "
                     "dense; a level is then the share of the pointwise weights, and the "
                     "compression ratio is the whole model's)")


class WeightPruningParams(PruningParams):
    levels: list[float] = Field(
        default=PAPER_WEIGHT_LEVELS,
        description="shares of conv weights pruned, in schedule order (paper: 50% to 90% "
                    "in 10% steps, 95%, 99%); fine-tuning epochs are split evenly over them")
    scope: Scope = Field("global", description=SCOPE_DESCRIPTION)
    convs: ConvSelection = Field("all", description=CONVS_DESCRIPTION)
    # The first form of this option: `sparsity` fixed the level, `steps` were the levels.
    sparsity: float | None = Field(
        None, gt=0, lt=1,
        description="older form of `level` (with `steps`: older form of `levels`)")
    steps: list[float] | None = Field(None, description="older form of `levels`")

    @model_validator(mode="before")
    @classmethod
    def _older_form(cls, data: Any) -> Any:
        """{sparsity: s, steps: [..., s]} means {levels: [..., s], level: s}; translated
        here so both forms give the same parameters (and share cached results)."""
        if not isinstance(data, dict) or ("sparsity" not in data and "steps" not in data):
            return data
        data = dict(data)
        sparsity, steps = data.get("sparsity"), data.get("steps")
        if (not isinstance(sparsity, (int, float, type(None)))
                or (sparsity is not None and not 0 < sparsity < 1)
                or not isinstance(steps, (list, type(None)))):
            return data  # the field checks name the wrong key
        if "levels" in data and steps is not None:
            raise ValueError("give `levels` or its older form `steps`, not both")
        if "level" in data and sparsity is not None:
            raise ValueError("give `level` or its older form `sparsity`, not both")
        if steps is not None:
            if sparsity is None:
                raise ValueError("`steps` (older form of `levels`) needs `sparsity`; "
                                 "write {levels: [...]} instead")
            _check_levels(steps, "steps")
            if steps[-1] != sparsity:
                raise ValueError(f"steps must increase and end at sparsity={sparsity}")
            data["levels"] = steps
        elif sparsity is not None and "levels" not in data:
            data["levels"] = [sparsity]
        if sparsity is not None:
            data["level"] = sparsity
        data.pop("sparsity", None)
        data.pop("steps", None)
        return data


def _model_name(ctx: CompressionContext) -> str | None:
    return getattr(ctx, "model_name", None) or None


def _prune_and_choose(params: PruningParams, model: nn.Module, ctx: CompressionContext,
                      prune_step: Callable[[nn.Module, float], object],
                      ) -> tuple[nn.Module, dict[str, Any]]:
    """Run the schedule, keep the chosen level's model, and describe it (the keys the
    report reads: levels, chosen_level, max_drop, compression_ratio)."""
    from dlas.compression.elbow import find_level, fixed_level, ideal_speedup, select_level
    from dlas.compression.pruning import iterative_pruning

    fixed = fixed_level(params.level, params.level_by_model, _model_name(ctx))

    def choose(records: list[dict[str, Any]]) -> int | None:
        selection = select_level(records, ctx.dense_accuracy, params.max_drop, fixed)
        return None if selection is None else selection.index

    epochs = ctx.budgets.finetune_epochs
    model, records, _ = iterative_pruning(
        model, ctx.bundle, params.levels, epochs, prune_step,
        lr=ctx.budgets.finetune_lr, settings=ctx.fit_settings, choose=choose,
        used=None if fixed is None else find_level(params.levels, fixed[0]))
    selection = select_level(records, ctx.dense_accuracy, params.max_drop, fixed)
    assert selection is not None  # the schedule returned, so a level was chosen
    chosen = records[selection.index]
    unfinetuned = [r["level"] for r in records if r["finetune_epochs"] == 0]
    info = {
        "levels": records,
        "chosen_level": selection.level,
        "chosen_sparsity": chosen["sparsity"],
        "chosen_accuracy": chosen["accuracy"],
        "max_drop": params.max_drop,
        "dense_accuracy": ctx.dense_accuracy,
        "selected_by": selection.selected_by,
        "within_drop": selection.within_drop,
        "selection": selection.note,
        "compression_ratio": ideal_speedup(selection.level),
        "chosen_finetune_epochs": chosen["finetune_epochs"],
        "unfinetuned_levels": unfinetuned,
    }
    return model, info


def finetune_warnings(info: dict[str, Any], finetune_epochs: int) -> list[str]:
    """What a pruning result must say about levels left without fine-tuning: their
    accuracy is the pruned model's before any recovery, and for the level used that is
    the accuracy the point reports."""
    unfinetuned = info.get("unfinetuned_levels") or []
    if not unfinetuned:
        return []
    levels = ", ".join(f"{level:g}" for level in unfinetuned)
    count = len(info.get("levels") or [])
    if finetune_epochs == 0:
        return [f"budgets.finetune_epochs is 0: no pruning level was fine-tuned, so the "
                f"level used ({info['chosen_level']:g}) reports its accuracy straight "
                "after pruning"]
    notes = [f"budgets.finetune_epochs {finetune_epochs} is fewer than the {count} pruning "
             f"levels: level(s) {levels} got no fine-tuning (their accuracy is before any "
             "recovery); raise finetune_epochs or give fewer `levels`"]
    if info.get("chosen_finetune_epochs") == 0:
        notes.append(f"the level used, {info['chosen_level']:g}, got no fine-tuning: its "
                     "accuracy is not what fine-tuning would recover")
    return notes


@register("compression", "weight_pruning", params=WeightPruningParams,
          tags={"sparse", PRUNING_TAG},
          version="3",  # v3: a fixed level gets its share of fine-tuning first
          description="L1 unstructured pruning of conv weights (global by default, or per "
                      "layer), iterative with fine-tuning between levels; the level used is "
                      "the elbow (the paper's 'weight pruning')")
def weight_pruning(params: WeightPruningParams, model: nn.Module,
                   ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult
    from dlas.compression.elbow import ideal_speedup
    from dlas.compression.pruning import prune_weights_global_l1, prune_weights_per_layer_l1

    prune = prune_weights_global_l1 if params.scope == "global" else prune_weights_per_layer_l1

    def step(m: nn.Module, level: float) -> nn.Module:
        return prune(m, level, params.convs)

    model, info = _prune_and_choose(params, model, ctx, step)
    info["scope"] = params.scope
    if params.convs != "all":  # the level counts only the pruned convs' weights
        info["convs"] = params.convs
        info["compression_ratio"] = ideal_speedup(info["chosen_sparsity"])
    return CompressionResult(model, info,
                             warnings=finetune_warnings(info, ctx.budgets.finetune_epochs))


class ChannelPruningParams(PruningParams):
    levels: list[float] = Field(
        default=PAPER_CHANNEL_LEVELS,
        description="shares of conv filters (output channels) pruned, in schedule order "
                    "(paper: 5% to 95% in 5% steps, 99%); fine-tuning epochs are split "
                    "evenly over them")


def _channel_pruning(params: ChannelPruningParams, model: nn.Module,
                     ctx: CompressionContext) -> tuple[nn.Module, dict[str, Any]]:
    from dlas.compression.channel import batchnorm_after_conv, prune_channels_global_l1

    batchnorms = batchnorm_after_conv(model)  # traced once, before any masks

    def prune_step(m: nn.Module, level: float) -> nn.Module:
        return prune_channels_global_l1(m, level, batchnorms)

    return _prune_and_choose(params, model, ctx, prune_step)


@register("compression", "channel_pruning", params=ChannelPruningParams,
          tags={"sparse", PRUNING_TAG},
          version="3",  # v2: L1 per weight, a layer's last filter pruned last; v3: fine-tuning
          # of a fixed level first
          description="global L1 structured pruning of conv output channels (whole filters "
                      "masked to zero, shape kept), iterative with fine-tuning; the level "
                      "used is the elbow (the paper's 'channel pruning')")
def channel_pruning(params: ChannelPruningParams, model: nn.Module,
                    ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult

    model, info = _channel_pruning(params, model, ctx)
    return CompressionResult(model, info,
                             warnings=finetune_warnings(info, ctx.budgets.finetune_epochs))


@register("compression", "channel_pruning_physical", params=ChannelPruningParams,
          tags={PRUNING_TAG}, version="3",
          description="channel_pruning, then the pruned channels and everything coupled to "
                      "them removed (torch-pruning): a smaller dense model computing the "
                      "same function")
def channel_pruning_physical(params: ChannelPruningParams, model: nn.Module,
                             ctx: CompressionContext) -> CompressionResult:
    import torch

    from dlas.compression.base import CompressionResult
    from dlas.compression.physical import remove_zero_channels

    model, info = _channel_pruning(params, model, ctx)
    example = torch.randn((1, *ctx.bundle.input_shape),
                          generator=torch.Generator().manual_seed(ctx.budgets.seed))
    model, removal = remove_zero_channels(model, example)
    info.update(removal)
    return CompressionResult(model, info,
                             warnings=finetune_warnings(info, ctx.budgets.finetune_epochs))


class BlockPruningParams(PruningParams):
    levels: list[float] = Field(
        default=PAPER_WEIGHT_LEVELS,
        description="shares of conv weights pruned, in whole blocks, in schedule order "
                    "(default: weight pruning's, 50% to 99%); fine-tuning epochs are split "
                    "evenly over them")
    block: tuple[int, int] = Field(
        (16, 1),
        description="block shape: (output channels, columns of the O x Cg*KH*KW weight "
                    "matrix). (16, 1): a 16-channel vector (the AVX-512 float32 width; "
                    "(8, 1) for AVX2), what the NCHWc block-CSR kernel skips; (4, 1) "
                    "XNNPACK's multi-channel shape; (1, 4) runs of one channel's weights")
    scope: Scope = Field("global", description=SCOPE_DESCRIPTION)

    @model_validator(mode="after")
    def _block_is_positive(self) -> BlockPruningParams:
        if min(self.block) < 1 or max(self.block) > 256:
            raise ValueError(f"block sizes must be 1 to 256, got {list(self.block)}")
        return self


@register("compression", "block_pruning", params=BlockPruningParams,
          tags={"sparse", PRUNING_TAG},
          description="global L1 block pruning of conv weights: blocks of output channels x "
                      "columns ranked across all convs by mean |w| and masked whole, "
                      "iterative with fine-tuning, the level used the elbow (sparsity the "
                      "sparse kernels can skip in vectors)")
def block_pruning(params: BlockPruningParams, model: nn.Module,
                  ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult
    from dlas.compression.structured import prune_blocks_global_l1, prune_blocks_per_layer_l1

    rows, cols = params.block
    prune = prune_blocks_global_l1 if params.scope == "global" else prune_blocks_per_layer_l1

    def prune_step(m: nn.Module, level: float) -> nn.Module:
        return prune(m, level, rows, cols)

    model, info = _prune_and_choose(params, model, ctx, prune_step)
    info.update(block=[rows, cols], scope=params.scope)
    return CompressionResult(model, info,
                             warnings=finetune_warnings(info, ctx.budgets.finetune_epochs))


class NMPruningParams(PruningParams):
    levels: list[float] = Field(
        default=[0.5],
        description="shares of conv weights pruned, each a multiple of 1/m: 0.5 with m = 4 "
                    "is 2:4 (two of every four kept)")
    m: int = Field(4, ge=2, le=64, description="group size M: consecutive input channels "
                                                "of one output channel and tap")

    @model_validator(mode="after")
    def _levels_fit_m(self) -> NMPruningParams:
        for level in self.levels:
            if abs(level * self.m - round(level * self.m)) > 1e-6:
                raise ValueError(f"level {level} is not a multiple of 1/m = 1/{self.m} "
                                 "(N:M keeps a whole number N of every M weights)")
        return self


@register("compression", "nm_pruning", params=NMPruningParams,
          tags={"sparse", PRUNING_TAG},
          description="N:M pruning of conv weights: in every group of M consecutive input "
                      "channels the M-N smallest |w| masked (2:4 by default), with "
                      "fine-tuning; levels are (M-N)/M")
def nm_pruning(params: NMPruningParams, model: nn.Module,
               ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult
    from dlas.compression.structured import prune_n_of_m

    def prune_step(m: nn.Module, level: float) -> nn.Module:
        return prune_n_of_m(m, level, params.m)

    model, info = _prune_and_choose(params, model, ctx, prune_step)
    info["m"] = params.m
    return CompressionResult(model, info,
                             warnings=finetune_warnings(info, ctx.budgets.finetune_epochs))
