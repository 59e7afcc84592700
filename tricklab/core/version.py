"""tricklab's version, importable from every floor without loading the package face."""

__version__ = "0.1.0"
