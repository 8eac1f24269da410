"""Animations: an SVG canvas, step-through widgets, and traces of the algorithms they draw."""
from .stepper import Frame, explorer, stepper
from .svg import PALETTE, Canvas, fmt
from .static import live_controls, live_only, static_note
from .source import file_section, show_file_section, show_listing, show_source, split_listing
from .traces import tree_reduce_levels

__all__ = ["Canvas", "Frame", "file_section", "show_file_section", "show_listing", "show_source", "split_listing", "PALETTE", "explorer", "fmt", "live_controls", "live_only", "static_note", "stepper",
           "tree_reduce_levels"]
