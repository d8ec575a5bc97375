"""wlock's version, in the one place the build reads it from (pyproject: [tool.hatch.version]).

A module of its own so that any layer can name it (the User-Agent, a SARIF report) without
importing the package's `__init__` from below.
"""

__version__ = "0.1.0"
