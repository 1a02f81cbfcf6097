"""Benchmarks that print figures. Not part of `make test`; run one with `python -m bench.NAME`."""
