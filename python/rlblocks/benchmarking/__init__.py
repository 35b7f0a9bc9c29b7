"""Benchmarks shipped with the package (``rlblocks bench``); ``benchmarks/*.py`` run them."""
