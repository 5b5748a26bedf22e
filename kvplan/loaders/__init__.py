"""Loaders: the edges where files, the Hub and built-in data become core objects (config.json
families, model and GPU lookup, scenario YAML, traces, calibration runs)."""
