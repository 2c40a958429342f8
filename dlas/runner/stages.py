"""Temporary: the old home of stage keys, kept while concurrent work moves to `dlas.stages`
and `dlas.targets.resolve`; removed before this change lands."""

from dlas.stages import STAGES, StageKeys, stage_keys  # noqa: F401
from dlas.stages.train import is_pretrained, pretrained_weights  # noqa: F401
from dlas.targets.resolve import resolve_target  # noqa: F401
