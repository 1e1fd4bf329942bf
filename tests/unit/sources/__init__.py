"""Unit tests of gpulens.sources."""
