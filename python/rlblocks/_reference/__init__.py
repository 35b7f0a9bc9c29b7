"""Pure-numpy twins of every native kernel.

They are the oracle the tests compare the C++ core against and the baseline the
benchmarks beat, so each one is the best vectorised numpy we can write, not a strawman.
One submodule per concept (``flatten``, ``image``, ``filters``, ``sequences``).
"""
