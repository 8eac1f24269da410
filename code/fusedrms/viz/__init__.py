"""Animations: an SVG canvas, step-through widgets, and traces of the algorithms they draw."""
from .stepper import Frame, explorer, stepper
from .svg import PALETTE, Canvas, fmt
from .source import file_section, show_file_section, show_source
from .traces import tree_reduce_levels

__all__ = ["Canvas", "Frame", "file_section", "show_file_section", "show_source", "PALETTE", "explorer", "fmt", "stepper", "tree_reduce_levels"]
