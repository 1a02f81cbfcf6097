"""`python -m bench`: run every benchmark that needs no running service."""

from __future__ import annotations

from bench import bench_expand

if __name__ == "__main__":
    bench_expand.main()
