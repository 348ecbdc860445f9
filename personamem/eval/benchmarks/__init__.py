"""Loaders that turn a benchmark folder in its upstream layout into a :class:`Benchmark`."""
