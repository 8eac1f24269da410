"""The built site served locally and one headless Chromium, shared by the browser tests."""
from __future__ import annotations

import pytest

from tests.browser import page_lint
from tests.conftest import require_or_skip

SITE = page_lint.DEFAULT_SITE


@pytest.fixture(scope="module")
def site_url():
    require_or_skip("FUSEDRMS_REQUIRE_BROWSER", (SITE / "index.html").is_file(),
                    f"no built book at {SITE}: run `make book` first")
    with page_lint.serve(SITE) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    require_or_skip("FUSEDRMS_REQUIRE_BROWSER", page_lint.chromium_path() is not None,
                    "Debian's `chromium` is not installed (apt-get install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:  # pragma: no cover - requirements.txt installs it
        require_or_skip("FUSEDRMS_REQUIRE_BROWSER", False, "the playwright package is missing")
    with page_lint.launch() as browser:
        yield browser
