"""Measurement: ``timer`` (the only module that creates GPU events), ``harness`` (the benchmark:
sweeps in worker processes, medians with their spread), ``plots`` (its charts)."""
