"""Sharding propagation over StableHLO as Shardy does it: import (call graph), propagation, the
comparison with Shardy's own pipeline, predicted communication.
"""
