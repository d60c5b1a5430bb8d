"""make demo's 8 MiniWoB++ tasks, read from where make demo takes them (``TASKS=`` in scripts/demo_common.sh), so
the benchmarks that time make demo's steps name them once: ``from demo_tasks import DEMO_TASKS``."""
import re
from pathlib import Path

_COMMON = Path(__file__).resolve().parent.parent / "scripts" / "demo_common.sh"
DEMO_TASKS = re.search(r"^TASKS=(\S+)$", _COMMON.read_text(encoding="utf-8"), re.M).group(1)
