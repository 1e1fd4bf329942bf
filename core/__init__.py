"""Shared by every layer: the sample model, source events and Source protocols, errors, config, units, host lists, /proc and safe-filesystem helpers, input limits, sanitizing."""
