"""Animations: an SVG canvas, step-through widgets, and traces of the algorithms they draw."""
from .stepper import Frame, explorer, stepper
from .svg import PALETTE, Canvas, fmt
from .traces import tree_reduce_levels

__all__ = ["Canvas", "Frame", "PALETTE", "explorer", "fmt", "stepper", "tree_reduce_levels"]
