"""What the story tests share: the values a chapter's prose shows through its story module."""
import re
from pathlib import Path

from fusedrms import records

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"


def assert_prose_values_exist(notebook: str, story, at_least: int) -> None:
    """Every ``story.value(told, "name")`` the notebook glues exists on the committed recording."""
    shown = set(re.findall(r'story\.value\(told, \\"(\w+)\\"\)', (CHAPTERS / notebook).read_text()))
    values = story.story_values(story.load(records.COMMITTED))
    assert len(shown) >= at_least, f"{notebook}: only {len(shown)} story values found"
    assert not shown - set(values), shown - set(values)
    assert story.MISSING not in values.values()
