"""train_mgrpo.py on the HF backend, run as a user runs it (subprocesses, DeepSpeed on CPU with gloo, the tiny
model, MiniWoB++ in real Chromium): 3 M-GRPO steps from a BC checkpoint write metrics, trajectories and the
training-dynamics PNG, and a resume from the step-2 checkpoint continues at step 3; the loop learns a fixed page;
the update scores actions at the rollout temperature; LoRA trains the adapters only; Ctrl-C on one of two ranks
stops both at the same step. The vLLM backend's runs: tests/test_train_mgrpo_vllm.py."""
import hashlib
import json
import os
import subprocess

import pytest
import torch

from training import BC_FAST, DEEPSPEED, ROOT, free_port, metrics, mixed_demos, params, run_script


def _run_record(out) -> tuple[str, list[dict], list[dict]]:
    """What a run wrote that must not depend on anything but its command: the sha256 of the published weights,
    the per-step metrics without wall-clock times, and the logged trajectories."""
    weights = hashlib.sha256((out / "hf" / "model.safetensors").read_bytes()).hexdigest()
    rows = [{k: v for k, v in r.items() if k != "time" and not k.endswith(("seconds", "per_minute"))}
            for r in metrics(out)]
    trajs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    return weights, rows, trajs


def test_mgrpo_steps_and_resume(half_right_bc, demos, tmp_path):
    """Three M-GRPO steps in Chromium with the options beyond the paper on (dynamic sampling, lr warm-up, GiGPO's
    step-level advantages, issue 99's demonstrations kept in the loss and task curriculum from failures), a
    checkpoint at step 2, and a resume from it. A run is a function of its command (issue
    67): the resumed process redoes step 3 exactly as the first did, the same trajectories, metrics and weights
    (sha256), though the browsers answer in another order (the rollouts sample at T = 0.9 from seeds of (--seed,
    group, task, page, index, turn) and decode batch-invariantly on this CPU). With unseeded rollouts this fails."""
    out = tmp_path / "rl"
    common = ["--model", str(half_right_bc), "--tasks", "miniwob:click-button,click-link", "--out", str(out),
              "--tasks-per-step", "2", "--group-size", "4", "--max-turns", "2", "--max-new-tokens", "40",
              "--prompt", "short", "--lr", "1e-4", "--save-every", "2",
              "--dynamic-sampling", "2", "--warmup-steps", "2",
              "--eval-every", "2", "--eval-pages", "2", "--temperature", "0.9", "--advantage", "gigpo",
              "--demo-data", str(demos), "--demo-loss-weight", "0.5", "--demo-loss-decay", "2", "--demo-batch", "4",
              "--rl-tasks", "failures"]
    run_script("train_mgrpo.py", *common, "--steps", "3")
    rows = metrics(out)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]       # step 0: greedy validation before the first update
    assert [r["step"] for r in rows if "val/success_rate" in r] == [0, 2, 3]
    assert all(0.0 <= r["val/success_rate"] <= 1.0 and r["val/env_errors"] == 0 for r in rows if r["step"] != 1)
    rows = rows[1:]
    assert any(r["rollout/frac_zero_std"] < 1.0 for r in rows), "no group had a learning signal"
    assert not torch.equal(params(str(half_right_bc)), params(str(out / "hf")))
    for key in ("rollout/success_rate", "rollout/response_tokens", "rollout/num_turns", "train/seconds",
                "rollout/rounds", "train/step_groups", "train/step_groups_signal",
                "rollout/success/miniwob/click-button", "rollout/success/miniwob/click-link"):
        assert key in rows[0]
    rounds = [r["rollout/rounds"] for r in rows]
    assert set(rounds) <= {1.0, 2.0}
    assert (out / "dynamics.png").stat().st_size > 0
    trajs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(trajs) == 3 and all(t["steps"] and "response" in t["steps"][0] for t in trajs)
    state2 = json.loads((out / "step_2" / "trainer_state.json").read_text())
    assert state2["step"] == 2 and state2["cursor"] == 2 * sum(rounds[:2])   # B groups per round
    # the levers: mu decays linearly to 0 over 2 steps; each task's success so far is checkpointed
    assert all(r["train/demo_mu"] == 0.5 * max(0, 1 - (r["step"] - 1) / 2) and r["train/demo_nll"] > 0
               for r in rows if "train/loss" in r)
    assert len(state2["task_success"]) == 2 and all(s is None or 0 <= s <= 1 for s in state2["task_success"])
    first = _run_record(out)

    (out / "latest").write_text("step_2")            # as if the run had died after step 2
    log = run_script("train_mgrpo.py", *common, "--steps", "50", "--resume", "--time-budget", "0.01", fresh=True)
    steps = [r["step"] for r in metrics(out)]
    assert steps == [0, 1, 2, 3]                     # step 3 redone, logged once; then out of time
    assert "(time budget reached)" in log
    assert [json.loads(line)["step"] for line in (out / "trajectories.jsonl").read_text().splitlines()] == [1, 2, 3]
    state3 = json.loads((out / "step_3" / "trainer_state.json").read_text())
    assert state3["step"] == 3 and state3["cursor"] == state2["cursor"] + 2 * metrics(out)[3]["rollout/rounds"]
    assert "val/success_rate" in metrics(out)[3]      # the last step of a resumed run is validated too
    again = _run_record(out)
    assert again[1:] == first[1:], "the resumed run's step 3 differs from the first run's"
    assert again[0] == first[0], "the resumed run's weights differ from the first run's"


def test_mgrpo_one_step_off_is_a_function_of_its_command(half_right_bc, tmp_path):
    """--async-steps 1 (issue 100): the next batch's rollouts run while the update runs, in Chromium, with a copy of
    the weights in the HF engine. Batch s is drawn by the weights after update s - 2: its engine log-probs differ
    from the updating trainer's exactly when update s - 1 changed the weights (the TIS correction, auto at K = 1,
    sees them). Two runs of one command end with the same weights, metrics and trajectories, and a run resumed from
    its step-3 checkpoint (which keeps batch 4, in flight then, finished) redoes step 4 as the first did."""
    common = ["--model", str(half_right_bc), "--tasks", "miniwob:click-button,click-link", "--tasks-per-step", "2",
              "--group-size", "4", "--max-turns", "2", "--max-new-tokens", "40", "--prompt", "short", "--lr", "1e-4",
              "--save-every", "3", "--eval-every", "2", "--eval-pages", "1", "--async-steps", "1"]
    first, second = tmp_path / "a", tmp_path / "b"
    log = run_script("train_mgrpo.py", *common, "--out", str(first), "--steps", "4")
    assert "rollout correction tis" in log
    rows = metrics(first)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4] and all(r["async/staleness"] == 1.0 for r in rows[1:])
    assert all(r["rollout/trajectories_per_minute"] > 0 for r in rows[1:])
    learned = {r["step"] for r in rows if "train/loss" in r}
    stale = {s: rows[s]["mismatch/max_abs_log_ratio"] for s in learned if s >= 2}
    assert any(s - 1 in learned for s in stale), rows                    # (a batch drawn by older weights)
    for s, gap in stale.items():   # rounding only when the weights that drew the batch are the trainer's
        assert (gap > 1e-4) == (s - 1 in learned), (s, gap, learned)
        assert (rows[s]["mismatch/ratio_std"] > 1e-6) == (s - 1 in learned), rows[s]   # the behaviour weights' spread
    assert (first / "step_3" / "pending_rank0.pt").exists() and not (first / "step_4" / "pending_rank0.pt").exists()
    record = _run_record(first)
    run_script("train_mgrpo.py", *common, "--out", str(second), "--steps", "4")
    assert _run_record(second) == record, "two runs of one --async-steps 1 command differ"
    (first / "latest").write_text("step_3")            # as if the run had died after step 3
    run_script("train_mgrpo.py", *common, "--out", str(first), "--steps", "50", "--resume", "--time-budget", "0.01",
               fresh=True)
    assert [r["step"] for r in metrics(first)] == [0, 1, 2, 3, 4]
    assert (first / "step_4" / "pending_rank0.pt").exists()   # batch 5 was in flight at the stop: kept
    assert _run_record(first) == record, "the resumed --async-steps 1 run differs from the uninterrupted one"


def test_mgrpo_fits_a_fixed_page(demos, tmp_path):
    """The loop learns (issue 42's regression test): from a BC checkpoint of the pretrained tiny base that
    clicks the right button about a third of the time (each demonstration beside two that click other elements;
    the base keeps the action format, as make demo's BC does), M-GRPO with every group on one fixed page
    (``--rl-pages 1``, B 2 x G 8, one interaction) drives rollout success from below 0.6 to at least 0.9 within
    6 steps. A loop that does not learn (a sign flipped, log-probs of the wrong tokens, weights that never reach
    the sampler) stays near its start. Measured: 0.19, 0.25, 0.69, 1.0, 0.94, 1.0 (and 1.0, 1.0 at steps 7-8)."""
    mixed = mixed_demos(demos, tmp_path / "mixed.jsonl", wrong=2)
    run_script("train_bc.py", *BC_FAST, "--model", "assets/tiny-web-base", "--lr", "1e-3",   # (the later flags win)
               "--data", str(mixed), "--out", str(tmp_path / "bc"), "--max-steps", "40", "--warmup-frac", "0.1")
    out = tmp_path / "rl"
    run_script("train_mgrpo.py", "--model", str(tmp_path / "bc" / "hf"), "--tasks", "miniwob:click-button",
               "--rl-pages", "1", "--out", str(out), "--steps", "6", "--tasks-per-step", "2", "--group-size", "8",
               "--max-turns", "1", "--max-new-tokens", "40", "--prompt", "short", "--lr", "3e-4", "--save-every", "0",
               "--grad-clip", "1", "--adam-beta2", "0.999",   # make demo's optimizer (scripts/demo_common.sh)
               "--no-batch-invariant")   # (learning, not reproducibility: float32 generation is faster)
    success = [r["rollout/success_rate"] for r in metrics(out)]
    print("rollout success by step", success)
    assert success[0] < 0.6 and max(success[-3:]) >= 0.9, success
    # the engine is the trainer's own float32 module here: the mismatch, logged on every step that updated, is
    # rounding only
    updated = [r for r in metrics(out) if "train/loss" in r]
    assert updated and all(r["mismatch/max_abs_log_ratio"] < 1e-4 and r["mismatch/ratio_outside"] == 0 for r in updated)


_TEMPERATURE_SCRIPT = r"""
import copy, json, sys
import torch
import logprobs, mismatch, policy, train_mgrpo
from trainlib import checkpoints, distributed, lora, optim
from rollout import EpisodeConfig, Sample

distributed.init_distributed()
torch.manual_seed(0)
model, tok = policy.build_tiny("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=300")
with torch.no_grad():   # peaked next-token distributions (a random init is near uniform at any T)
    model.get_decoder().norm.weight.mul_(30.0)
ref = copy.deepcopy(model)
with torch.no_grad():
    for p in ref.parameters():
        p.add_(0.05 * torch.randn_like(p))
ref.eval().requires_grad_(False)
base = copy.deepcopy(model)
cfg = optim.ds_config("configs/zero0.json", micro_batch=2, grad_accum=1, world_size=1, bf16=False, grad_clip=1.0)
engine = optim.make_engine(model, cfg, lr=0.0, weight_decay=0.0, schedule=optim.linear_warmup(0))
g = torch.Generator().manual_seed(1)
samples = [Sample(torch.randint(0, 300, (n,), generator=g).tolist(), [0] * (n - k) + [1] * k)
           for n, k in ((12, 4), (9, 3), (15, 6))]
batch = train_mgrpo.Batch(samples, adv=[1.0, -1.0, 0.5], weight=[0.1, 0.2, 0.3], groups=1, zero_std=[False],
                          dropped=0)
out = {}
# issue 101: update(how=...) changes the speed only. The textbook (plain: a row per sample, every position's logits)
# and the swaps (rows; packed, the default: identical samples merged, a context computed once) give one loss and one
# gradient, summed over each way's own micro-batches; three actions from one context, one of them taken twice
ctx = torch.randint(3, 300, (10,), generator=g).tolist()
acts = [torch.randint(3, 300, (k,), generator=g).tolist() for k in (3, 5, 2, 3)]
acts[3] = acts[0]
shared = [Sample(ctx + a, [0] * 10 + [1] * len(a)) for a in acts] + samples
step_batch = train_mgrpo.Batch(shared, adv=[1.0, -0.5, 0.25, 1.0, 1.0, -1.0, 0.5],
                               weight=[0.1, 0.2, 0.1, 0.1, 0.1, 0.2, 0.3], groups=1, zero_std=[False], dropped=0)
out["how"] = {}
for how in ("plain", "rows", "packed"):
    m = copy.deepcopy(base)
    eng = optim.make_engine(m, cfg, lr=0.0, weight_decay=0.0, schedule=optim.linear_warmup(0))
    grads = {n: torch.zeros_like(p) for n, p in m.named_parameters()}

    def summed(n):   # each micro-batch's gradient of parameter n added up (returns None: the gradient flows on)
        def hook(gr):
            grads[n].add_(gr)
        return hook
    hooks = [p.register_hook(summed(n)) for n, p in m.named_parameters()]
    args = train_mgrpo.Args(micro_batch=2, episode=EpisodeConfig(temperature=0.7))
    st = train_mgrpo.update(eng, ref, step_batch, tok.pad_token_id, args, how=how)
    [h.remove() for h in hooks]
    out["how"][how] = {"stats": {k: st[k] for k in ("train/loss", "train/kl", "train/entropy", "train/grad_norm",
                                                    "train/samples_scored")},
                       "grad": torch.cat([gr.flatten() for gr in grads.values()]).tolist()}
for T in (1.0, 0.4):
    args = train_mgrpo.Args(micro_batch=2, updates_per_batch=2, episode=EpisodeConfig(temperature=T))
    got = train_mgrpo.update(engine, ref, batch, tok.pad_token_id, args)   # lr 0: the policy stays put
    with torch.no_grad():
        lp, ent, mask = logprobs.forward_logprobs(model, samples, tok.pad_token_id, "cpu", T)
        lr = logprobs.forward_logprobs(ref, samples, tok.pad_token_id, "cpu", T)[0]
        d = lr - lp
        n = mask.sum()
        want = {"kl": float(((d.exp() - d - 1) * mask).sum() / n), "entropy": float((ent * mask).sum() / n)}
    out[T] = {"kl": got["train/kl"], "entropy": got["train/entropy"], "clip_frac": got["train/clip_frac"],
              "want": want}
# the engine's log-probs (the trainer's, moved by noise, as another engine's would be): the update's mismatch figures
# and its TIS loss against the same computed here
with torch.no_grad():
    lp, _, mask = logprobs.forward_logprobs(model, samples, tok.pad_token_id, "cpu", 1.0)
    lr = logprobs.forward_logprobs(ref, samples, tok.pad_token_id, "cpu", 1.0)[0]
for s, row, m in zip(samples, lp, mask):
    s.logprobs = (row[m.bool()] + 0.5 * torch.randn(int(m.sum()), generator=g)).tolist()
eng = mismatch.engine_logprobs(samples, mask)
want = mismatch.mismatch_stats([mismatch.mismatch_sums(lp, eng, mask)])
for mode in ("none", "tis"):
    args = train_mgrpo.Args(micro_batch=2, rollout_engine=mismatch.RolloutEngine(rollout_correction=mode))
    got = train_mgrpo.update(engine, ref, batch, tok.pad_token_id, args)
    is_w = mismatch.rollout_correction(lp, eng, mask, mode, 2.0)
    loss = train_mgrpo.mgrpo_loss(lp, lp, lr, mask, torch.tensor(batch.adv), torch.tensor(batch.weight),
                                  is_weight=is_w)[0]
    out[mode] = {"loss": (got["train/loss"], float(loss)), "mismatch": {k: (got[k], v) for k, v in want.items()}}
print("RESULT " + json.dumps(out))
"""


def test_mgrpo_update_scores_actions_at_the_rollout_temperature(tmp_path):
    """The rollouts sample from softmax(logits / T); the update (old policy, ratio, reference, KL) scores the
    same distribution. With a real DeepSpeed engine at lr 0 (so the policy does not move), T = 1 and T = 0.4:
    the reported KL to a perturbed reference and the entropy equal the ones computed at that T, and they
    differ between the two temperatures (an update that scored at T = 1 whatever the rollouts used, as it
    once did, trained off-policy). And the textbook update (``how="plain"``: a row per sample, log pi from every
    position's logits) gives the loss, KL, entropy and gradient of its swaps, ``rows`` and the default ``packed``
    (identical samples merged, a context computed once, the action tokens scored alone)."""
    script = tmp_path / "temperature.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + _TEMPERATURE_SCRIPT)
    out = run_script(str(script), timeout=600)
    res = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    for T in ("1.0", "0.4"):
        assert res[T]["kl"] == pytest.approx(res[T]["want"]["kl"], rel=1e-4), res
        assert res[T]["entropy"] == pytest.approx(res[T]["want"]["entropy"], rel=1e-4), res
        assert res[T]["clip_frac"] == 0.0
    assert res["0.4"]["entropy"] < 0.8 * res["1.0"]["entropy"] and res["0.4"]["kl"] != pytest.approx(res["1.0"]["kl"])
    # issue 86: the samples' engine log-probs reach the update: its mismatch figures and its TIS-weighted loss
    for mode in ("none", "tis"):
        for key, (got, want) in res[mode]["mismatch"].items():
            assert got == pytest.approx(want, rel=1e-4, abs=1e-6), (mode, key)
        assert res[mode]["loss"][0] == pytest.approx(res[mode]["loss"][1], rel=1e-4), (mode, res[mode]["loss"])
    assert res["none"]["loss"][0] != pytest.approx(res["tis"]["loss"][0], rel=1e-3)
    # issue 101: the textbook update and its swaps: one loss, one gradient (the swaps score fewer samples, so their
    # per-token KL and entropy average over other tokens)
    plain = res["how"]["plain"]
    assert plain["stats"]["train/samples_scored"] == 7 and res["how"]["packed"]["stats"]["train/samples_scored"] == 6
    assert max(map(abs, plain["grad"])) > 1e-3
    for how in ("rows", "packed"):
        for key in ("train/loss", "train/grad_norm"):
            assert res["how"][how]["stats"][key] == pytest.approx(plain["stats"][key], rel=1e-5, abs=1e-7), (how, key)
        torch.testing.assert_close(torch.tensor(res["how"][how]["grad"]), torch.tensor(plain["grad"]),
                                   rtol=1e-4, atol=1e-6)
    assert res["tis"]["mismatch"]["mismatch/ratio_outside"][0] > 0


def test_demonstrations_in_the_loss_add_mu_times_eq1_to_the_update(tmp_path):
    """--demo-data (issue 99, CHORD): on a real DeepSpeed engine, the update's gradient with the demonstration term
    is Eq. 2's plus mu_t times Eq. 1's on the step's demonstration batch, Eq. 1 computed here the textbook way (every
    position's logits, log-softmax, the action tokens' NLL averaged over the batch's action tokens); mu_t decays
    linearly (0.5 at step 0, 0.25 at step 1, 0 from step 2 with --demo-loss-decay 2); the batch is
    ``bc_data.draw``'s for the step; with every advantage 0 the gradient is the demonstrations' alone. Fails if the
    term is dropped, scaled wrongly, or scored on other tokens."""
    script = tmp_path / "demo_term.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + _DEMO_TERM_SCRIPT)
    res = json.loads(run_script(str(script), timeout=600).split("RESULT ", 1)[1].splitlines()[0])
    assert res["mu"] == [0.5, 0.25, 0.0, 0.0]
    assert max(map(abs, res["rl"])) > 1e-4 and max(map(abs, res["demo"])) > 1e-4
    torch.testing.assert_close(torch.tensor(res["zero_adv"]), torch.tensor(res["demo"]), rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(torch.tensor(res["both"]), torch.tensor(res["rl"]) + torch.tensor(res["demo"]),
                               rtol=1e-4, atol=1e-7)
    assert res["stats"]["train/demo_mu"] == 0.25
    assert res["stats"]["train/demo_nll"] == pytest.approx(res["want_nll"], rel=1e-5)
    assert res["drawn"]


_DEMO_TERM_SCRIPT = r"""
import copy, json, random
import torch
import bc_data, levers, logprobs, policy, train_mgrpo
from trainlib import distributed, optim
from rollout import EpisodeConfig, Sample

distributed.init_distributed()
torch.manual_seed(0)
base, tok = policy.build_tiny("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=300")
cfg = optim.ds_config("configs/zero0.json", micro_batch=2, grad_accum=1, world_size=1, bf16=False, grad_clip=1.0)
g = torch.Generator().manual_seed(1)
rand = lambda n: torch.randint(3, 300, (n,), generator=g).tolist()
demos = [(rand(n), [0] * (n - k) + [1] * k) for n, k in ((11, 4), (8, 3), (14, 5), (9, 2), (12, 6), (10, 3))]
rl = [Sample(rand(n), [0] * (n - k) + [1] * k) for n, k in ((12, 4), (9, 3))]
args = train_mgrpo.Args(steps=3, micro_batch=2, beta=0.0, episode=EpisodeConfig(temperature=1.0),
                        levers=train_mgrpo.Levers(demo_data="demos", demo_loss_weight=0.5, demo_loss_decay=2,
                                                  demo_batch=4))
out = {"mu": [levers.demo_weight(args.levers, t) for t in range(4)]}


def gradient(adv, with_demos):   # one update at lr 0 from the same weights, its gradient summed over micro-batches
    m = copy.deepcopy(base)
    eng = optim.make_engine(m, cfg, lr=0.0, weight_decay=0.0, schedule=optim.linear_warmup(0))
    grads = {n: torch.zeros_like(p) for n, p in m.named_parameters()}

    def summed(n):
        def hook(gr):
            grads[n].add_(gr)
        return hook
    hooks = [p.register_hook(summed(n)) for n, p in m.named_parameters()]
    term = levers.demonstration_term(demos, 1, args, tok.pad_token_id) if with_demos else None
    batch = train_mgrpo.Batch(rl, adv=adv, weight=[0.1, 0.2], groups=1, zero_std=[False], dropped=0)
    st = train_mgrpo.update(eng, None, batch, tok.pad_token_id, args, how="plain", demos=term)
    [h.remove() for h in hooks]
    return torch.cat([gr.flatten() for gr in grads.values()]).tolist(), st


out["rl"] = gradient([1.0, -1.0], False)[0]
out["both"], out["stats"] = gradient([1.0, -1.0], True)
out["zero_adv"] = gradient([0.0, 0.0], True)[0]
# Eq. 1 by hand on step 1's batch: mu_1 x the NLL of the action tokens averaged over them, every position's logits
piece = bc_data.draw(demos, 1, 4, 1, 0, args.seed)
m = copy.deepcopy(base)
ids, attn, mask = logprobs.pad_batch([d[0] for d in piece], [d[1] for d in piece], tok.pad_token_id)
lp = logprobs.token_logprobs(m, ids, attn, 1.0)[0]          # [n, L]: log pi of token t given tokens < t
nll = -(lp * mask).sum() / mask.sum()
(0.25 * nll).backward()
out["demo"] = torch.cat([p.grad.flatten() for p in m.parameters()]).tolist()
out["want_nll"] = float(nll)
out["drawn"] = sorted(map(str, piece)) != sorted(map(str, bc_data.draw(demos, 0, 4, 1, 0, args.seed)))
out["stats"] = {k: v for k, v in out["stats"].items() if k.startswith("train/demo")}
print("RESULT " + json.dumps(out))
"""


_LORA_SCRIPT = r"""
import asyncio, json, sys
from pathlib import Path
import torch
import logprobs, policy, train_mgrpo
from trainlib import checkpoints, distributed, lora, optim
from engines import hf_backend
from rollout import Sample

out_dir = Path(sys.argv[1])
distributed.init_distributed()
SPEC = "tiny:layers=2,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=300"
torch.manual_seed(0)
base, tok = policy.build_tiny(SPEC)
start = {n: p.detach().clone() for n, p in base.named_parameters()}
cfg = optim.ds_config("configs/zero0.json", micro_batch=4, grad_accum=1, world_size=1, bf16=False, grad_clip=1.0)


def engine_of(model):
    return optim.make_engine(lora.add_lora(model, 2, 16.0), cfg, lr=3e-2, weight_decay=0.0,
                             schedule=optim.linear_warmup(0))


engine = engine_of(base)
res = {"trained": sum(p.numel() for p in engine.module.parameters() if p.requires_grad),
       "total": sum(p.numel() for p in engine.module.parameters()), "gap": []}
prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]


async def steps():
    gen = hf_backend.HFBackend(engine.module.get_base_model(), tok, max_new_tokens=6, temperature=1.0,
                               stop_ids=[])
    res["loop"] = hf_backend.continuous_batching_supported(engine.module.get_base_model())
    for _ in range(3):   # sample, check the recorded log-probs against the update's scoring, update
        gens = await asyncio.gather(*(gen.generate(p) for p in prompts))
        samples = [Sample(p + g.ids, [0] * len(p) + [1] * len(g.ids)) for p, g in zip(prompts, gens)]
        with torch.no_grad():
            lp = logprobs.forward_logprobs(engine, samples, tok.pad_token_id, "cpu")[0]
        res["gap"].append(max(abs(sum(g.logprobs) - float(row.sum())) for g, row in zip(gens, lp)))
        batch = train_mgrpo.Batch(samples, adv=[1.0, -1.0], weight=[0.5, 0.5], groups=1, zero_std=[False],
                                  dropped=0)
        train_mgrpo.update(engine, None, batch, tok.pad_token_id, train_mgrpo.Args(micro_batch=4, beta=0.0))
    await gen.aclose()

asyncio.run(steps())
frozen = {n.removeprefix("base_model.model.").replace(".base_layer.", "."): p
          for n, p in engine.module.named_parameters() if not p.requires_grad}
res["frozen_all_base"] = sorted(frozen) == sorted(start)
res["base_moved"] = max(float((p - start[n]).abs().max()) for n, p in frozen.items())
state = engine.module.state_dict()
res["lora_b"] = max(float(v.abs().max()) for k, v in state.items() if "lora_B" in k)
ckpt = checkpoints.save_checkpoint(engine, tok, out_dir, 3, {"cursor": 0}, 0)
ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
with torch.no_grad():
    want = engine.module(input_ids=ids).logits
    plain, _ = policy.load(str(ckpt / "hf"))
    res["plain_type"] = type(plain).__name__
    res["exported_gap"] = float((plain(input_ids=ids).logits - want).abs().max())
    torch.manual_seed(0)
    res["exported_moved"] = float((plain(input_ids=ids).logits - policy.build_tiny(SPEC)[0](input_ids=ids).logits
                                   ).abs().max())
    torch.manual_seed(0)
    again = engine_of(policy.build_tiny(SPEC)[0])   # a resumed run: the same base, its adapters from the checkpoint
    checkpoints.load_checkpoint(again, ckpt, 0)
    res["resumed_gap"] = float((again.module(input_ids=ids).logits - want).abs().max())
print("RESULT " + json.dumps(res))
"""


def test_mgrpo_lora_trains_the_adapters_only_and_exports_merged_weights(tmp_path):
    """``--lora-rank``: with a real DeepSpeed engine, M-GRPO updates of a LoRA-wrapped tiny model move only the
    adapters (the base weights stay bit-identical); the HF backend samples through the adapted layers on its own
    decode loop, and the log-probs it records equal the update's scoring; a checkpoint's hf/ is a plain model
    with the merged weights (same logits as the adapted model, different from the base), and a resume restores
    the adapters."""
    script = tmp_path / "lora.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + _LORA_SCRIPT)
    res = json.loads(run_script(str(script), str(tmp_path / "run"), timeout=600).split("RESULT ", 1)[1].splitlines()[0])
    assert 0 < res["trained"] < res["total"] / 10, res
    assert res["loop"] is True and max(res["gap"]) < 1e-4, res
    assert res["frozen_all_base"] and res["base_moved"] == 0.0 and res["lora_b"] > 1e-3, res
    assert res["plain_type"] == "Qwen2ForCausalLM" and res["exported_gap"] < 1e-4, res
    assert res["exported_moved"] > 1e-3, res
    assert res["resumed_gap"] == 0.0, res



def _rank_pid(launcher: int, script: str, local_rank: int) -> int | None:
    """The process id of one rank of a `deepspeed`-launched script: among the launcher's own descendants (a
    search of every process could find another run's rank), the one whose command line names it."""
    import psutil
    for proc in psutil.Process(launcher).children(recursive=True):
        try:
            cmd = proc.cmdline()
        except psutil.Error:
            continue
        if any(c.endswith(script) for c in cmd) and f"--local_rank={local_rank}" in cmd:
            return proc.pid
    return None



@pytest.mark.parametrize("async_steps", [0, 1])
def test_mgrpo_ctrl_c_on_one_rank_stops_every_rank_at_the_same_step(tmp_path, async_steps):
    """Two ranks through the `deepspeed` launcher; SIGINT reaches rank 1 only (as when one node's job is
    interrupted). Both ranks agree on the flag after the step, stop at the same step and save once; without
    the agreement rank 0 would wait forever in the next step's collective. With --async-steps 1 (issue 100) the
    next batch's rollouts, DAPO's rounds and their collectives (on the ranks' side group) run beside the update's
    and the step's own collectives, and each rank keeps its batch in flight, finished, in the checkpoint."""
    import signal
    import time
    out = tmp_path / "rl2"
    environ = dict(os.environ, PYTHONUNBUFFERED="1")
    environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".torch_extensions"))
    cmd = [*DEEPSPEED, "--num_gpus", "2", "--master_port", str(free_port()),
           "train_mgrpo.py", "--model", "tiny", "--tasks", "miniwob:click-button", "--out", str(out),
           "--steps", "200", "--tasks-per-step", "2", "--group-size", "2", "--max-turns", "1",
           "--max-new-tokens", "8", "--prompt", "short", "--beta", "0", "--save-every", "0",
           "--async-steps", str(async_steps), "--dynamic-sampling", str(2 * async_steps)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)   # a failure below kills the ranks and their browsers too
    try:
        deadline = time.time() + 300
        while not ((out / "metrics.jsonl").exists() and metrics(out)) and time.time() < deadline:
            assert proc.poll() is None, proc.stdout.read()[-4000:]
            time.sleep(0.5)
        pid = _rank_pid(proc.pid, "train_mgrpo.py", 1)
        assert pid is not None, "rank 1 not found"
        os.kill(pid, signal.SIGINT)
        log = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, log[-4000:]
    steps = [r["step"] for r in metrics(out)]
    assert steps == list(range(1, len(steps) + 1)) and steps[-1] < 200
    assert sorted(p.name for p in out.glob("step_*")) == [f"step_{steps[-1]}"]   # saved once, at the last step
    assert (out / "latest").read_text() == f"step_{steps[-1]}" and "(interrupted)" in log
    kept = sorted(p.name for p in (out / f"step_{steps[-1]}").glob("pending_rank*.pt"))
    assert kept == (["pending_rank0.pt", "pending_rank1.pt"] if async_steps else []), kept
