"""What a build-from-spec kernel exercise's test asserts of its typical mistakes: each is refused
with words of its own in the message and in the hint, and every hint differs."""


def assert_named_mistake(exercise, label: str, expected: dict) -> None:
    """``expected[label]`` is (words the message must hold, words the hint must hold)."""
    fb = exercise.check(exercise.mistakes[label])
    message, hint = expected[label]
    assert not fb.ok and message in fb.message and hint in fb.hint, str(fb)
    assert not fb.error


def assert_every_mistake_expected_with_its_own_hint(exercise, expected: dict) -> None:
    assert set(expected) == set(exercise.mistakes)
    assert len({h for _, h in expected.values()}) == len(expected)
