"""Unit tests of gpulens.agent."""
