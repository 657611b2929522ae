"""Benchmarks: `make bench` runs every bench_*.py and writes bench/RESULTS.md."""
