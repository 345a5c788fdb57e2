"""The ``quarry`` command line: ``main`` parses and dispatches; one module per command group."""

from engine.cli.main import main

__all__ = ["main"]
