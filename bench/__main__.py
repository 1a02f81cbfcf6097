"""`python -m bench`: run every benchmark that needs no running service and no argument.

The others are run one by one (see docs/performance.md, "Benchmarks"); `bench.bench_peers`
needs no service either, but takes a spec and minutes: `python -m bench.bench_peers SPEC`.
"""

from __future__ import annotations

from bench import bench_expand

if __name__ == "__main__":
    bench_expand.main()
