"""The test suite; it mirrors the packages (`tests/integration/` for work across processes).

`loaded_after` is what the import-cost tests share: which heavy packages a fresh interpreter
holds after some of our code ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def loaded_after(code: str, packages: Sequence[str]) -> list[str]:
    """The modules of `packages` (top-level names) loaded once `code` ran in a fresh
    interpreter in the checkout; fails with its error output if `code` does."""
    wanted = list(packages)
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {wanted!r})))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
