"""Whole-tree checks: layering rules, lint and types."""
