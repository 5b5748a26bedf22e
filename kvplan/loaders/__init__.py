"""Loaders: the edges where files and configs become core objects."""
