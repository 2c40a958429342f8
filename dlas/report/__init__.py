"""Reports that reproduce the DLAS paper's tables, figures and observations from the
results database (`dlas report`), and the paper experiments that feed them
(`dlas reproduce`)."""

from dlas.report.build import ReportFiles, build_report

__all__ = ["ReportFiles", "build_report"]
