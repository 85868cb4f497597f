"""dlc's version: written into every artifact's manifest and shown by `dlc --version`."""

__version__ = "0.1.0"
