"""Test doubles and shared helpers (no tests here)."""
