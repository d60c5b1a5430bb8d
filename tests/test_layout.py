"""The project's module layout (README, "Layout"): no import cycle among its modules, dependencies flow one way
(leaves import no script, no script imports another), every task family joins the same way, and the names
users call as ``env.<name>`` keep working wherever they now live."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = {p.stem for p in ROOT.glob("*.py")}
LEAVES = {"compress", "policy", "trainlib", "actions", "tasks", "sandbox"}
SCRIPTS = {"train_bc", "train_mgrpo", "eval", "pretrain"}


def imports_of(module: str) -> set[str]:
    """Project modules that ``module`` imports anywhere in its code (functions too), not counting
    ``if TYPE_CHECKING:`` blocks (type hints only, never run)."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
            else:
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name.split(".")[0] for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.module and node.level == 0:
                found.add(node.module.split(".")[0])

    Visitor().visit(ast.parse((ROOT / f"{module}.py").read_text(encoding="utf-8")))
    return (found & MODULES) - {module}


def test_no_import_cycle_and_dependencies_flow_one_way():
    graph = {m: imports_of(m) for m in MODULES}
    state: dict[str, str] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", "import cycle: " + " -> ".join(path[path.index(m):] + [m])
        state[m] = "open"
        for d in sorted(graph[m]):
            visit(d, path + [m])
        state[m] = "done"

    for m in sorted(graph):
        visit(m, [])
    for leaf in LEAVES:
        assert graph[leaf] <= LEAVES, f"{leaf} is a leaf but imports {sorted(graph[leaf] - LEAVES)}"
    for script in SCRIPTS:
        assert not graph[script] & SCRIPTS, f"{script} imports the script(s) {sorted(graph[script] & SCRIPTS)}"
    # nothing below env imports it: env gathers the modules, the loop and the scripts use env
    assert not [m for m in ("actions", "tasks", "sandbox", "browser", "execute", "miniwob_tasks", "webarena",
                            "sitesuite") if "env" in graph[m]]
    assert "env" not in graph["compress"] and not graph["actions"] - {"compress"}


def test_the_three_families_join_the_same_way():
    """Each family module registers itself on import; ``import env`` alone finds all three, in a fresh
    interpreter (no script or test imported anything first)."""
    code = ("import env, tasks; print(sorted(tasks._FAMILIES)); "
            "print(len(env.load_tasks('miniwob:click-button,login-user')), "
            "env.load_tasks('suite:add-to-cart')[0].family)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:2] == ["['miniwob', 'suite', 'webarena']", "2 suite"]
    for module, name in (("miniwob_tasks", "MiniWoBFamily"), ("webarena", "WebArenaFamily"),
                         ("sitesuite", "SuiteFamily")):
        source = (ROOT / f"{module}.py").read_text(encoding="utf-8")
        assert f"register_family({name}())" in source, module


@pytest.mark.parametrize("name, home", [
    ("load_tasks", "tasks"), ("Task", "tasks"), ("TaskFamily", "tasks"), ("register_family", "tasks"),
    ("family_of", "tasks"), ("EpisodeCrash", "tasks"), ("EVAL_SEEDS", "tasks"), ("RL_SEEDS", "tasks"),
    ("parse_action", "actions"), ("format_action", "actions"), ("Action", "actions"),
    ("ActionParseError", "actions"), ("ACTION_NAMES", "actions"), ("NEEDS_ELEMENT", "actions"),
    ("BrowserPool", "browser"), ("WebEnv", "browser"), ("Observation", "browser"), ("StepResult", "browser"),
    ("find_chromium", "browser"), ("start_browser_server", "browser"), ("MAX_OBS_CHARS", "browser"),
    ("host_entry", "sandbox"), ("url_allowed", "sandbox"), ("proxy_settings", "sandbox"),
    ("MiniWoBFamily", "miniwob_tasks"), ("miniwob_task", "miniwob_tasks"), ("MINIWOB_UNSOLVABLE", "miniwob_tasks"),
    ("evaluate", "webarena"), ("load_webarena_tasks", "webarena"), ("webarena_login", "webarena"),
    ("WebArenaFamily", "webarena"), ("SitePool", "webarena"), ("SuiteFamily", "sitesuite"),
])
def test_public_names_keep_working_from_env(name, home):
    import importlib

    import env
    assert getattr(env, name) is getattr(importlib.import_module(home), name)


def test_env_py_runs_a_task_by_hand():
    """``python env.py TASK SEED``, the README's manual check: the observation, then actions from stdin until the
    episode ends (real Chromium)."""
    out = subprocess.run([sys.executable, "env.py", "miniwob:click-button", "3"], cwd=ROOT, capture_output=True,
                         text=True, timeout=180, input='do(action="Type", argument="x", element="1")\n'
                                                      'do(action="Click", element="0")\n')
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'intent: Click on the "no" button.' in out.stdout
    assert "'done_reason': None" in out.stdout               # the first action ran, the episode went on
    assert out.stdout.rstrip().endswith("done: reward=1.0 reason=page_done")
