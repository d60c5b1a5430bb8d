"""Run a repo script as one rank of a `deepspeed` launch with MiniWoB's files missing on local rank 1 once
the tasks are loaded, as on a node whose install broke: every reset there fails for real (Chromium gets a
404 for the task page), while rank 0 is healthy.
Usage: deepspeed --num_gpus 2 tests/broken_rank.py train_mgrpo.py ARGS..."""
import os
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":           # spawned engine processes re-import this file: do nothing there
    root = Path(__file__).resolve().parent.parent
    sys.path[0] = str(root)
    script = next(a for a in sys.argv[1:] if a.endswith(".py"))
    sys.argv.remove(script)
    sys.argv[0] = script
    if os.environ.get("LOCAL_RANK") == "1":
        import env
        env.MiniWoBFamily._read = lambda self, rel_path: None        # every file answers 404
    runpy.run_path(str(root / script), run_name="__main__")
