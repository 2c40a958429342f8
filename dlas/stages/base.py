"""What a stage is: a declared node of the sweep's stage graph.

A stage says
- its `name` and `version` (bump it when what it stores changes shape),
- `code` and `libraries`: the dlas code (paths under the package) and the installed
  distributions that decide its output; the key hashes their digest, so changed code is
  never served from an old cache entry (`dlas.stages.code_version`),
- `parent`: the upstream stage whose key its own key hashes (the graph is a chain per
  point: data -> train -> compress -> import -> compile -> measure, or import -> baseline),
- `needs`: the upstream stages whose outputs `compute` reads (checked: asking for another
  one raises),
- `key_inputs`: the inputs its key hashes besides the parent's key,
- `reads`: the layers whose choices `key_inputs` may read (it is given a view of the point
  with only those, so reading another raises): points that agree on them and on the
  parent's key share the key, which is what lets a grid of tens of thousands of points
  compute each shared key once (`dlas.stages.keys.KeyMemo`),
- `compute`: produce the output into a fresh folder and return its typed facts,
- `load`: turn a stored entry back into its typed output,
- `resources`: what an executor must give it (CPUs; `exclusive` for a timing, which holds
  the whole machine).

Executors (`dlas.runner.executor`) run stages; a stage never calls another one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from dlas.stages.facts import Facts

if TYPE_CHECKING:
    from dlas.sweep.grid import Point

F = TypeVar("F", bound=Facts)
Out = TypeVar("Out")


@dataclass(frozen=True)
class Resources:
    """What one run of a stage needs from the machine it runs on."""

    #: CPU cores it keeps busy (a hint to executors that pack stages onto nodes).
    cpus: float = 1.0
    #: Nothing else may run on the machine meanwhile (timings, tuning measurements).
    exclusive: bool = False


class StageConsole(Protocol):
    """What a stage may say while it runs: the part of the run's console
    (`dlas.runner.console.RunConsole`) stages use. A Protocol, so that stages do not
    import the runner that runs them."""

    def note(self, text: str) -> None:
        """One line for the user (a warning, a choice made)."""

    def activity(self, text: str) -> AbstractContextManager[None]:
        """What the stage is doing for a while (shown as a live status)."""

    def epoch_reporter(self, what: str) -> Callable[[dict[str, Any], int], None] | None:
        """A callback for training's finished epochs, or None where a live bar shows
        them."""


@dataclass
class StageEnv:
    """Where stages run: the workspace and how to report (shared by all stages of a run)."""

    workspace_root: Path
    console: StageConsole
    progress: bool = True


class Inputs:
    """A stage's view of its upstream outputs: only those it declared in `needs`, loaded
    on first use (a cached measurement that is not recomputed never loads its model)."""

    def __init__(self, stage: Stage[Any], output: Callable[[Stage[Any]], Any],
                 facts: Callable[[Stage[Any]], Any]) -> None:
        self._stage, self._output, self._facts = stage, output, facts

    def _check(self, upstream: Stage[Any]) -> None:
        if upstream.name not in self._stage.needs:
            raise RuntimeError(
                f"stage '{self._stage.name}' reads '{upstream.name}', which it does not "
                f"declare: add it to {type(self._stage).__name__}.needs")

    def __getitem__(self, upstream: Stage[Out]) -> Out:
        self._check(upstream)
        return self._output(upstream)

    def facts(self, upstream: StoredStage[F, Any]) -> F:
        """The upstream entry's facts alone (cheap: no model is loaded)."""
        self._check(upstream)
        return self._facts(upstream)


@dataclass
class Job:
    """One run of a stage's compute for one point."""

    point: Point
    key: str
    inputs: Inputs
    env: StageEnv
    #: The fresh folder the output goes to (published atomically when compute returns).
    dir: Path
    #: A folder kept across interrupted runs of this entry (e.g. epoch checkpoints),
    #: made on first use.
    scratch: Callable[[], Path]


def option_facts(choice: Any) -> dict[str, Any]:
    """`{"facts": ...}` for an option whose output depends on facts of this machine
    (`registry.Option.key_facts`), else nothing, so other options' keys are unchanged."""
    facts = choice.option.key_facts
    return {"facts": facts(choice.params)} if facts is not None else {}


class Stage(ABC, Generic[Out]):
    """A node of the stage graph whose output type is `Out`."""

    name: ClassVar[str]
    version: ClassVar[int]
    parent: ClassVar[str | None]
    #: The name the parent's key has among this stage's key inputs.
    parent_field: ClassVar[str] = ""
    #: The layers whose choices `key_inputs` reads (besides the budgets).
    reads: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[tuple[str, ...]] = ()
    #: The dlas code that decides the output, relative to the package (`compiler`,
    #: `models/training`); the stage's own module is added. Hashed into the key.
    code: ClassVar[tuple[str, ...]] = ()
    #: Installed distributions that decide the output; their versions are in the key.
    libraries: ClassVar[tuple[str, ...]] = ()
    resources: ClassVar[Resources] = Resources()

    def resources_for(self, point: Point) -> Resources:
        """The point's request (e.g. a compile that tunes measures candidates, so it
        holds the machine); the class's `resources` by default."""
        return self.resources

    @abstractmethod
    def key_inputs(self, point: Point) -> dict[str, Any]:
        """What this stage's key hashes besides its parent's key; `point` holds only the
        layers in `reads`."""

    def __repr__(self) -> str:
        return f"<stage {self.name} v{self.version}>"


class TransientStage(Stage[Out]):
    """A stage whose output is rebuilt in each process, not stored (datasets are their own
    cache on disk)."""

    @abstractmethod
    def build(self, point: Point, env: StageEnv) -> Out:
        """The output, for this process."""


class StoredStage(Stage[Out], Generic[F, Out]):
    """A stage whose output is stored in the cache under its key."""

    facts_type: ClassVar[type[Facts]]

    @abstractmethod
    def compute(self, job: Job) -> F:
        """Write the output's files into `job.dir` and return its facts."""

    @abstractmethod
    def load(self, path: Path, facts: F) -> Out:
        """The typed output of a stored entry."""

    def read_facts(self, meta: dict[str, Any]) -> F:
        return self.facts_type.model_validate(meta)  # type: ignore[return-value]
