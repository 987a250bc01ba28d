"""Styrmin."""
