"""Benchmarks of the page (not imported by it): ``python -m app.bench.pages``."""
