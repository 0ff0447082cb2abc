"""The lab format: schema, loader, Markdown rendering, lint and self-test."""

from labserver.content.loader import BrokenLab, Lab, LabCatalog, Step, load_lab
from labserver.content.schema import I18n, LabSpec, StepSpec

__all__ = ["BrokenLab", "I18n", "Lab", "LabCatalog", "LabSpec", "Step", "StepSpec", "load_lab"]
