"""Reports: results CSV, configurable Markdown/HTML tables, reconstruction grids, privacy–utility plot."""

from leakshield.image_grid import image_grid
from leakshield.report.html import ReportFiles, build_report
from leakshield.report.tables import PivotTable, joined_rows, pivot, results_csv

__all__ = ["PivotTable", "ReportFiles", "build_report", "image_grid", "joined_rows", "pivot", "results_csv"]
