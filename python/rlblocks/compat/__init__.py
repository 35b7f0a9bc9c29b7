"""Compatibility layers: :mod:`rlblocks.compat.rllib` (RLlib names, RLlib weight import)."""

from __future__ import annotations
