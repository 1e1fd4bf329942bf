"""Unit tests of gpulens.core."""
