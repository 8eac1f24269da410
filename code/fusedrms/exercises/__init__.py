"""Exercise checkers, one module per chapter (``ch01`` ...). See :mod:`fusedrms.exercises.core`."""
from .core import Exercise, Feedback, Malformed, as_choice, as_number, as_vector, correct, wrong

__all__ = ["Exercise", "Feedback", "Malformed", "as_choice", "as_number", "as_vector", "correct",
           "wrong"]
