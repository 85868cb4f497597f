"""Importers: models from other formats as .dl text plus a weights file."""
