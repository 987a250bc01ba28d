"""The flow runs' log lines an action's process prints: the same text, rendered by Rich only for a terminal."""

from __future__ import annotations

import io
import logging

from prefect.logging.formatters import PrefectFormatter
from prefect.logging.handlers import PrefectConsoleHandler

from styrmin_backend.agent.prefect._process import plain_console_unless_a_terminal

LINE = "Started Job shop-migrate-706a in namespace shop: shop migrate in example.com/shop/server:1.2.0"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _logger(name: str, stream: io.StringIO) -> logging.Logger:
    logger = logging.getLogger(f"styrmin-tests.console.{name}")
    handler = PrefectConsoleHandler(stream=stream)
    handler.setFormatter(PrefectFormatter(format="%(levelname)s | %(name)s - %(message)s"))
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    return logger


def test_a_pipe_gets_the_same_lines_as_plain_text_and_a_terminal_keeps_rich() -> None:
    rich_out, plain_out, terminal = io.StringIO(), io.StringIO(), Terminal()
    as_before = _logger("before", rich_out)
    piped, shown = _logger("piped", plain_out), _logger("shown", terminal)

    plain_console_unless_a_terminal([piped, shown])

    assert type(piped.handlers[0]) is logging.StreamHandler
    assert isinstance(shown.handlers[0], PrefectConsoleHandler)
    for logger in (as_before, piped):
        logger.info(LINE)
        logger.debug("not shown: below the level")
    assert plain_out.getvalue().replace(".piped", ".before") == rich_out.getvalue()
    assert plain_out.getvalue() == f"INFO | styrmin-tests.console.piped - {LINE}\n"
