"""Unit tests of gpulens.ipc."""
