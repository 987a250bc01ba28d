"""``python -m styrmin.cli``: the same as ``styrminctl``."""

from styrmin.cli.app import app

app(prog_name="styrminctl")
