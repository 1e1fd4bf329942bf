"""Collectors: read this machine truthfully. Never imports textual or rich."""
