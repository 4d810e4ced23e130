"""Benchmarks (`make bench`): numbers as ratios against a baseline measured in the same run."""
