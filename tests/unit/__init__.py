"""Unit tests, one folder per product package (the package the test mainly exercises)."""
