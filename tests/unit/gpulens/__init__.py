"""Unit tests of gpulens.gpulens."""
