"""The paper's published values (experiments/paper.yaml), read into lookups the report uses.

The values are data so that a renamed option or a corrected cell is a one-line YAML edit;
this module only indexes them.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas.resources import data_dir

PAPER_FILE = "paper.yaml"


def experiments_dir() -> Path:
    """`$DLAS_EXPERIMENTS_DIR`, else the installed package's copy of `experiments/`, else
    the checkout's (`dlas.resources.data_dir`)."""
    env = os.environ.get("DLAS_EXPERIMENTS_DIR")
    return Path(env) if env else data_dir("experiments")


@dataclass(frozen=True)
class PaperSpeedRow:
    """One row of Tables 3, 4 or 6 (cells as printed: "GEMM", "WP", "WP+GEMM", None)."""

    table: str
    dataset: str
    platform: str
    tuning: str  # "untuned" | "tuned"
    model: str
    fastest_algorithm: dict[str, str | None]  # our compression name -> paper algorithm
    fastest_compression: dict[str, str | None]  # our algorithm family -> paper compression
    overall: str | None


@dataclass
class Paper:
    """Indexed paper values; see experiments/paper.yaml for what each holds."""

    datasets: dict[str, str]
    stand_ins: dict[str, str]
    models: dict[str, dict[str, str]]
    compressions: dict[str, str]
    compression_aliases: dict[str, str]
    algorithms: dict[str, str]
    numbering: dict[str, Any]
    accuracy_tables: dict[str, dict[str, Any]]
    speed_rows: list[PaperSpeedRow]
    expected_speedup: list[dict[str, Any]]
    observations: dict[int, dict[str, Any]]
    source: Path = field(default=Path(PAPER_FILE))

    # -- names ---------------------------------------------------------------------------

    def role(self, dataset: str) -> str | None:
        """The paper dataset ours reproduces ('cifar10', 'imagenet') or None."""
        return self.datasets.get(dataset)

    def model_name(self, dataset: str, model: str) -> str | None:
        role = self.role(dataset)
        return self.models.get(role or "", {}).get(model)

    def compression_abbrev(self, compression: str, aliases: bool = False) -> str | None:
        if compression in self.compressions:
            return self.compressions[compression]
        return self.compression_aliases.get(compression) if aliases else None

    def algorithm_name(self, family: str) -> str | None:
        return self.algorithms.get(family)

    def number(self, kind: str, dataset: str, device: str | None = None) -> str | None:
        """'Table 3', 'Figure 4', ... for our dataset (and device), if the paper has one."""
        entry = self.numbering.get(kind, {}).get(self.role(dataset) or "")
        if isinstance(entry, dict):
            return entry.get(device or "")
        return entry

    # -- values --------------------------------------------------------------------------

    def accuracy_row(self, dataset: str, model: str) -> dict[str, Any] | None:
        role, paper_model = self.role(dataset), self.model_name(dataset, model)
        for table in self.accuracy_tables.values():
            if table.get("dataset") == role and paper_model in table.get("models", {}):
                return table["models"][paper_model]
        return None

    def speed_row(self, dataset: str, platform: str, tuned: bool,
                  model: str) -> PaperSpeedRow | None:
        role, paper_model = self.role(dataset), self.model_name(dataset, model)
        tuning = "tuned" if tuned else "untuned"
        for row in self.speed_rows:
            if (row.dataset, row.platform, row.tuning, row.model) == (
                    role, platform, tuning, paper_model):
                return row
        return None

    def expected_pct(self, dataset: str, platform: str, tuned: bool,
                     compression: str) -> float | None:
        role, tuning = self.role(dataset), "tuned" if tuned else "untuned"
        for entry in self.expected_speedup:
            if (entry["dataset"], entry["platform"], entry["tuning"], entry["compression"]) == (
                    role, platform, tuning, compression):
                return float(entry["pct"])
        return None


def _cell(value: Any) -> str | None:
    return None if value in (None, "-") else str(value)


def parse_paper(raw: dict[str, Any], source: Path) -> Paper:
    columns = raw["speed_table_columns"]
    expected = ["platform", "tuning", "model"]
    if columns[:3] != expected or columns[-1] != "overall":
        raise ValueError(f"{source}: speed_table_columns must start with {expected} and end "
                         "with 'overall'")
    comp_cols = [c for c in columns[3:-1] if c in raw["compressions"]]
    fam_cols = [c for c in columns[3:-1] if c in raw["algorithms"]]
    if len(comp_cols) + len(fam_cols) != len(columns) - 4:
        raise ValueError(f"{source}: every speed_table_columns entry between 'model' and "
                         "'overall' must be a key of `compressions` or of `algorithms`")
    rows = []
    for table, spec in raw["speed_tables"].items():
        for cells in spec["rows"]:
            if len(cells) != len(columns):
                raise ValueError(f"{source}: {table} row {cells} has {len(cells)} cells, "
                                 f"expected {len(columns)} ({', '.join(columns)})")
            values = dict(zip(columns, cells, strict=True))
            rows.append(PaperSpeedRow(
                table=table, dataset=spec["dataset"], platform=values["platform"],
                tuning=values["tuning"], model=values["model"],
                fastest_algorithm={c: _cell(values[c]) for c in comp_cols},
                fastest_compression={f: _cell(values[f]) for f in fam_cols},
                overall=_cell(values["overall"]),
            ))
    return Paper(
        datasets=raw["datasets"], stand_ins=raw.get("stand_ins", {}), models=raw["models"],
        compressions=raw["compressions"], compression_aliases=raw.get("compression_aliases", {}),
        algorithms=raw["algorithms"], numbering=raw.get("numbering", {}),
        accuracy_tables=raw["accuracy_tables"], speed_rows=rows,
        expected_speedup=raw.get("expected_speedup", []),
        observations={int(k): v for k, v in raw["observations"].items()}, source=source,
    )


@functools.cache
def _load(path: Path) -> Paper:
    # the sweep config's reader: duplicate keys and alias bombs are errors with file:line
    from dlas.sweep.yaml_source import load_yaml, read_config_text

    raw, _ = load_yaml(read_config_text(path, "paper values file"), str(path),
                       "paper values file")
    return parse_paper(raw, path)


def load_paper(path: Path | None = None) -> Paper:
    path = Path(path) if path else experiments_dir() / PAPER_FILE
    if not path.exists():
        raise FileNotFoundError(f"paper values not found: {path}")
    return _load(path.resolve())
