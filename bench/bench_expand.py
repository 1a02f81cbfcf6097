"""How long does a 50,000-trial sweep take to expand? (grid and random, best of 3)

python -m bench.bench_expand
"""

from __future__ import annotations

import time

from core.spec.sweep import load_spec
from scheduler.expand import expand, tally

GRID = """
name: bench-grid
dataset: {name: digits}
model:
  hidden_layers: {int: [1, 5]}
  hidden_units: {range: [16, 1016, 20]}
  activation: [relu, tanh, sigmoid, elu, gelu]
training:
  lr: [0.001, 0.003, 0.01, 0.03]
  seed: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
"""

RANDOM = """
name: bench-random
dataset: {name: digits}
model:
  hidden_layers: {int: [1, 5]}
  hidden_units: {int: [16, 1024]}
  activation: {choice: [relu, tanh, sigmoid]}
  dropout: {uniform: [0, 0.5]}
training:
  optimizer: {choice: [sgd, adam]}
  lr: {loguniform: [0.0001, 0.1]}
  momentum: {uniform: [0.5, 0.99], when: {optimizer: sgd}}
search: {algorithm: random, trials: 50000, seed: 0}
"""


def _best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    for label, text in (("grid", GRID), ("random", RANDOM)):
        spec = load_spec(text)
        n = tally(spec).count
        seconds = _best_of(lambda spec=spec: expand(spec))
        with_config = _best_of(lambda spec=spec: expand(spec, with_config=True), repeat=1)
        print(
            f"expand {label:6s} {n:>7,} trials: {seconds:6.3f} s "
            f"({n / seconds:,.0f} trials/s); with resolved configs: {with_config:.3f} s"
        )


if __name__ == "__main__":
    main()
