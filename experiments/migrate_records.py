"""Migrate committed result records in place; re-runs nothing.

    python experiments/migrate_records.py [results]

1. ``command``: a record written by ``experiments/glue_comparison.py`` before it recorded
   commands machine-independently holds the absolute path of the interpreter that ran it
   (``/work/main/.venv/bin/python train.py ...``); it becomes ``python train.py ...``.

Every rewrite is atomic and idempotent: a second run changes nothing.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mtdnn.files import atomic_write_json, read_json  # noqa: E402


def portable_command(command: str) -> str:
    """The command with its interpreter written as ``python``."""
    words = shlex.split(command)
    if words and Path(words[0]).name.startswith("python"):
        words[0] = "python"
    return shlex.join(words)


def migrate(root: Path) -> list[Path]:
    """Rewrite every ``result.json`` under ``root`` that needs it; return those changed."""
    changed = []
    for path in sorted(root.rglob("result.json")):
        record = read_json(path)
        if isinstance(record.get("command"), str):
            command = portable_command(record["command"])
            if command != record["command"]:
                atomic_write_json(path, {**record, "command": command})
                changed.append(path)
    return changed


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "results")
    changed = migrate(root)
    print(f"{len(changed)} records rewritten under {root}")
    print(json.dumps([str(p) for p in changed[:3]]))


if __name__ == "__main__":
    main()
