"""Loading scripts and fixtures, lowering, compiling, rewriting, running."""

__version__ = "0.1.0"
