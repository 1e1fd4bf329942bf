"""Unit tests of gpulens.store."""
