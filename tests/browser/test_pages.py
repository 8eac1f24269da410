"""Every page of the built book passes the page lint (tests/browser/page_lint.py), one test per
page: ``pytest tests/browser/test_pages.py -k 03_hip`` checks chapter 3 alone, and
``python -m tests.browser.page_lint chapters/03_hip.html`` prints the same findings."""
from __future__ import annotations

import pytest

from tests.browser import page_lint

pytestmark = pytest.mark.browser

SITE = page_lint.DEFAULT_SITE
PAGES = page_lint.site_pages(SITE) if (SITE / "index.html").is_file() else ["index.html"]


@pytest.mark.parametrize("path", PAGES)
def test_page_passes_the_lint(path, browser, site_url):
    violations = page_lint.lint_page(browser, site_url, path)
    assert not violations, (f"{path}: {len(violations)} violation(s) "
                            f"(python -m tests.browser.page_lint {path}):\n"
                            + "\n".join(map(str, violations)))
