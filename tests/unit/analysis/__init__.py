"""Unit tests of gpulens.analysis."""
