"""The library version (written into saved files)."""
__version__ = "0.1.0"
