"""``styrminctl``, the command line of Styrmin (the console script runs ``styrmin.cli:app``)."""

from styrmin.cli.app import app

__all__ = ["app"]
