__version__ = "0.3.0"
"""The version of this package: the version of the ctxwin extension it is made for
(``default_version`` in ctxwin.control), which it moves with."""
