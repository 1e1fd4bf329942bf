"""Unit tests of gpulens.tui."""
