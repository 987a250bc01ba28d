"""Pages of every list of the API, the same way everywhere: ``limit`` and ``cursor`` in, the next
page's URL in the ``Link`` header (``rel="next"``, as RFC 8288 and GitHub's API), the items as the
body. A client follows the link as it is and never builds a cursor itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, TypeVar

from fastapi import Query, Request, Response

from styrmin_backend.domain.errors import InvalidInput

MAX_PAGE_SIZE = 500
"""The most items one page of any list holds."""

T = TypeVar("T")

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE, description="The most items on this page.")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=200,
        description="Where the page starts: copy it from the Link header's next URL, never build it.",
    ),
]


def next_link(request: Request, response: Response, cursor: str) -> None:
    """Set ``Link: <this URL with cursor=...>; rel="next"`` on ``response``."""
    url = request.url.remove_query_params(["cursor", "before"]).include_query_params(cursor=cursor)
    response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'


def page_of(
    items: Sequence[T],
    key: Callable[[T], str],
    *,
    limit: int,
    cursor: str | None,
    request: Request,
    response: Response,
) -> list[T]:
    """The ``limit`` items of ``items`` (in their order) after the one whose ``key`` is ``cursor``,
    with the link to the next page when there are more.

    Raises:
        InvalidInput: no item has that key any more (it was deleted); start again without a cursor.
    """
    start = 0
    if cursor is not None:
        found = next((index for index, item in enumerate(items) if key(item) == cursor), None)
        if found is None:
            raise InvalidInput(
                f'The cursor "{cursor}" names nothing in this list any more; list again without it.',
                field="cursor",
            )
        start = found + 1
    page = list(items[start : start + limit])
    if start + limit < len(items):
        next_link(request, response, key(page[-1]))
    return page
