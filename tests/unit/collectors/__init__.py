"""Unit tests of gpulens.collectors."""
