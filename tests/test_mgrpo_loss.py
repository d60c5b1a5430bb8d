"""mgrpo_loss against a slow reference written term by term from Eq. 2 with Python loops; the batch, the task
sampler and dynamic sampling on made-up trajectories."""
import asyncio
import math
import random

import pytest
import torch

from rollout import Sample, Trajectory
import env as webenv
import logprobs
from trainlib import optim
from levers import sample_groups
from train_mgrpo import Credit, eq2_weights, group_advantages, mgrpo_batch, mgrpo_loss, signal_groups, step_tasks
from engines.vllm_backend import sync_weights


def make_batch(rng: random.Random, n_groups=3, G=4, max_steps=5, max_tokens=7):
    """Random groups -> trajectories -> actions -> tokens with uneven lengths."""
    groups = []
    for _ in range(n_groups):
        trajs = []
        for _ in range(G):
            steps = rng.randint(1, max_steps)
            actions = []
            for _ in range(steps):
                n = rng.randint(1, max_tokens)
                actions.append([(rng.uniform(-3, 0), rng.uniform(-3, 0), rng.uniform(-3, 0)) for _ in range(n)])
            trajs.append({"reward": float(rng.random() < 0.5), "actions": actions})
        groups.append(trajs)
    return groups


def slow_reference(groups, clip_eps, beta, eps=1e-6):
    """L = mean over groups of -(1/G) sum_i (1/|tau_i|) sum_j (1/|a_ij|) sum_t [min(rho A, clip(rho) A) - beta KL]."""
    total = 0.0
    for trajs in groups:
        G = len(trajs)
        rs = [t["reward"] for t in trajs]
        mean = sum(rs) / G
        std = math.sqrt(sum((r - mean) ** 2 for r in rs) / G)
        group_sum = 0.0
        for t in trajs:
            A = (t["reward"] - mean) / (std + eps)
            traj_sum = 0.0
            for action in t["actions"]:
                act_sum = 0.0
                for lp, old, ref in action:
                    rho = math.exp(lp - old)
                    clipped = min(max(rho, 1 - clip_eps), 1 + clip_eps)
                    kl = math.exp(ref - lp) - (ref - lp) - 1
                    act_sum += min(rho * A, clipped * A) - beta * kl
                traj_sum += act_sum / len(action)
            group_sum += traj_sum / len(t["actions"])
        total += -group_sum / G
    return total / len(groups)


def flatten(groups):
    """Pack the nested batch as the trainer does: one row per action, padded to T."""
    G = len(groups[0])
    rewards = torch.tensor([t["reward"] for trajs in groups for t in trajs], dtype=torch.float64)
    adv_traj = group_advantages(rewards, G)
    rows, adv, group_of, steps, toks = [], [], [], [], []
    for gi, trajs in enumerate(groups):
        for t in trajs:
            group_of.append(gi)
            steps.append(len(t["actions"]))
            toks.append([len(a) for a in t["actions"]])
    weights = eq2_weights(group_of, steps, toks)
    w_flat = []
    i = 0
    for trajs in groups:
        for t in trajs:
            for j, action in enumerate(t["actions"]):
                rows.append(action)
                adv.append(adv_traj[i])
                w_flat.append(weights[i][j])
            i += 1
    T = max(len(r) for r in rows)
    logp, old, ref, mask = (torch.zeros(len(rows), T, dtype=torch.float64) for _ in range(4))
    for n, r in enumerate(rows):
        for k, (lp, o, rf) in enumerate(r):
            logp[n, k], old[n, k], ref[n, k], mask[n, k] = lp, o, rf, 1.0
    return logp, old, ref, mask, torch.stack(adv), torch.tensor(w_flat, dtype=torch.float64)


@pytest.mark.parametrize("seed", range(5))
def test_matches_slow_reference(seed):
    groups = make_batch(random.Random(seed))
    logp, old, ref, mask, adv, w = flatten(groups)
    loss, stats = mgrpo_loss(logp, old, ref, mask, adv, w, clip_eps=0.2, beta=0.001)
    assert abs(loss.item() - slow_reference(groups, 0.2, 0.001)) < 1e-6
    assert 0.0 <= stats["clip_frac"] <= 1.0


def test_micro_batches_add_up():
    logp, old, ref, mask, adv, w = flatten(make_batch(random.Random(7)))
    full, _ = mgrpo_loss(logp, old, ref, mask, adv, w)
    parts = sum(mgrpo_loss(logp[s], old[s], ref[s], mask[s], adv[s], w[s])[0]
                for s in (slice(0, 5), slice(5, 11), slice(11, None)))
    assert abs(full.item() - parts.item()) < 1e-9


def test_differs_from_token_mean_when_lengths_differ():
    logp, old, ref, mask, adv, w = flatten(make_batch(random.Random(3)))
    loss, _ = mgrpo_loss(logp, old, ref, mask, adv, w)
    token_mean_w = torch.full_like(w, 1.0 / mask.sum().item())       # every token weighs the same
    token_mean, _ = mgrpo_loss(logp, old, ref, mask, adv, token_mean_w)
    assert abs(loss.item() - token_mean.item()) > 1e-4


def test_zero_std_group_has_zero_advantage():
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]), 4)
    assert torch.all(adv[:4] == 0)
    assert torch.allclose(adv[4:], torch.tensor([-1.0, 1.0, -1.0, 1.0]), atol=1e-5)


def test_kl_gradient_zero_when_policy_equals_reference():
    torch.manual_seed(0)
    ref = -torch.rand(4, 6, dtype=torch.float64)
    logp = ref.clone().requires_grad_(True)
    mask, w = torch.ones(4, 6, dtype=torch.float64), torch.full((4,), 0.1, dtype=torch.float64)
    loss, stats = mgrpo_loss(logp, logp.detach(), ref, mask, torch.zeros(4, dtype=torch.float64), w, beta=1.0)
    loss.backward()
    assert stats["kl"] == 0.0
    assert torch.allclose(logp.grad, torch.zeros_like(logp.grad))
    # and away from the reference, the KL term does push back
    logp2 = (ref + 0.5).requires_grad_(True)
    mgrpo_loss(logp2, logp2.detach(), ref, mask, torch.zeros(4, dtype=torch.float64), w, beta=1.0)[0].backward()
    assert logp2.grad.abs().sum() > 0


def test_beta_zero_needs_no_reference():
    logp, old, _, mask, adv, w = flatten(make_batch(random.Random(1)))
    loss, stats = mgrpo_loss(logp, old, None, mask, adv, w, beta=0.0)
    assert torch.isfinite(loss) and stats["kl"] == 0.0


# ---- trajectories -> batch (mgrpo_batch): environment failures, zero-std groups, several ranks ----

def as_trajectories(groups, env_errors: set[tuple[int, int]]):
    """The nested batch as rollout.Trajectory records; (group, i) in env_errors marks an episode the
    environment ended. Returns the trajectories and each sample's (logp, old, ref) token values."""
    trajs, values = [], {}
    for g, members in enumerate(groups):
        for i, t in enumerate(members):
            tr = Trajectory(group=g, task_id="t", seed=g, reward=t["reward"], env_error=(g, i) in env_errors)
            for action in t["actions"]:
                s = Sample(ids=list(range(3 + len(action))), mask=[0, 0, 0] + [1] * len(action))
                values[id(s)] = action
                tr.samples.append(s)
            trajs.append(tr)
    return trajs, values


def batch_loss(batch, values) -> torch.Tensor:
    T = max(sum(s.mask) for s in batch.samples)
    logp, old, ref, mask = (torch.zeros(len(batch.samples), T, dtype=torch.float64) for _ in range(4))
    for n, s in enumerate(batch.samples):
        for k, (lp, o, rf) in enumerate(values[id(s)]):
            logp[n, k], old[n, k], ref[n, k], mask[n, k] = lp, o, rf, 1.0
    adv, w = torch.tensor(batch.adv, dtype=torch.float64), torch.tensor(batch.weight, dtype=torch.float64)
    return mgrpo_loss(logp, old, ref, mask, adv, w, clip_eps=0.2, beta=0.001)[0]


@pytest.mark.parametrize("seed", range(3))
def test_batch_leaves_out_environment_failures_and_adds_up_over_ranks(seed):
    rng = random.Random(seed)
    groups = make_batch(rng, n_groups=6, G=4)
    groups[0][0]["reward"], groups[0][1]["reward"] = 0.0, 1.0            # group 0 mixes rewards ...
    groups[1] = [dict(t, reward=1.0) for t in groups[1]]                  # group 1: all equal (zero std)
    env_errors = {(0, 2), (2, 0), (2, 1), (2, 2), (4, 3)}                 # ... group 2 keeps 1 valid episode
    trajs, values = as_trajectories(groups, env_errors)

    # the reference: Eq. 2 over the valid trajectories of the groups with >= 2 of them and some signal
    valid = [[t for i, t in enumerate(members) if (g, i) not in env_errors] for g, members in enumerate(groups)]
    learn = [v for v in valid if len(v) >= 2 and len({t["reward"] for t in v}) > 1]
    expected = slow_reference(learn, 0.2, 0.001)

    one = mgrpo_batch(trajs)                                              # one rank
    assert one.dropped == 1 and one.groups == len(learn)
    assert abs(batch_loss(one, values).item() - expected) < 1e-6
    assert sum(one.zero_std) >= 1 and len(one.zero_std) == 5
    assert not {id(s) for t in trajs if t.env_error for s in t.samples} & {id(s) for s in one.samples}

    # two ranks, three groups each: update() multiplies each rank's weights by the world size and DeepSpeed
    # averages their gradients, so the mean of their (2 x) losses, i.e. the sum of mgrpo_batch's, is Eq. 2
    ranks = [[t for t in trajs if t.group < 3], [t for t in trajs if t.group >= 3]]
    total = sum(mgrpo_batch(r).groups for r in ranks)
    losses = [2 * batch_loss(mgrpo_batch(r, reduce_sum=lambda n: total), values) for r in ranks]
    assert abs((losses[0] + losses[1]).item() / 2 - expected) < 1e-6


def test_invalid_penalty_separates_equal_outcomes_by_their_unparsable_responses():
    """``--invalid-penalty``: each unparsable response lowers its trajectory's reward for the advantages only. Two
    failures, one with 2 unparsable responses: without the penalty a zero-std group (no signal); with 0.1 the
    cleaner failure gets A = +1 and the other -1; a success with one unparsable response stays above a failure."""
    groups = make_batch(random.Random(7), n_groups=2, G=2)
    groups[0] = [dict(t, reward=0.0) for t in groups[0]]
    groups[1][0]["reward"], groups[1][1]["reward"] = 1.0, 0.0
    trajs, _ = as_trajectories(groups, set())
    trajs[1].parse_errors = 2                                             # group 0's second failure
    trajs[2].parse_errors = 1                                             # group 1's success
    plain = mgrpo_batch(trajs)
    assert plain.zero_std == [True, False] and plain.groups == 1
    penalised = mgrpo_batch(trajs, Credit(invalid_penalty=0.1))
    assert penalised.zero_std == [False, False] and penalised.groups == 2
    first = {id(s): a for s, a in zip(penalised.samples, penalised.adv)}
    assert [first[id(t.samples[0])] for t in trajs] == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-4)
    assert [t.reward for t in trajs] == [0.0, 0.0, 1.0, 0.0]             # the trajectories keep their success


def test_batch_keep_zero_std_keeps_their_kl_only():
    groups = make_batch(random.Random(5), n_groups=2, G=3)
    groups[0] = [dict(t, reward=0.0) for t in groups[0]]
    groups[1][0]["reward"], groups[1][1]["reward"] = 0.0, 1.0
    trajs, _ = as_trajectories(groups, set())
    skip, keep = mgrpo_batch(trajs, Credit(zero_std="skip")), mgrpo_batch(trajs, Credit(zero_std="keep"))
    assert keep.groups == skip.groups + 1
    n0 = sum(len(t["actions"]) for t in groups[0])
    assert keep.adv[:n0] == [0.0] * n0      # zero advantage: only the KL term acts on that group


# ---- which groups a step rolls: DAPO's dynamic sampling ----

def _tasks(n: int) -> list[webenv.Task]:
    return [webenv.Task(f"t{k}", "x", "", "http://x.test/", family="miniwob") for k in range(n)]


def _group(g: int, task_id: str, rewards: list[float], env_error: int = -1) -> list[Trajectory]:
    return [Trajectory(group=g, task_id=task_id, seed=0, reward=r, env_error=i == env_error)
            for i, r in enumerate(rewards)]


def _fake_roller(rewards_per_round: list[list[list[float]]]):
    """next_round() of a step whose k-th round gives groups with the given rewards; records the calls."""
    calls = []
    tasks = _tasks(2)

    async def next_round(n, first):
        k = len(calls)
        calls.append((n, first))
        drawn = step_tasks(tasks, 0, n, 0)
        return [t for g, r in enumerate(rewards_per_round[k]) for t in _group(first + g, drawn[g].task_id, r)]
    return next_round, calls


def test_dynamic_sampling_rolls_until_a_round_worth_of_groups_has_signal():
    flat, mixed = [1.0, 1.0], [1.0, 0.0]
    roll, calls = _fake_roller([[flat, flat], [mixed, flat], [flat, mixed], [mixed, mixed]])
    trajs, rounds, informative = asyncio.run(sample_groups(roll, 2, 4, signal_groups))
    assert (rounds, informative) == (3, 2) and calls == [(2, 0), (2, 2), (2, 4)]   # new group ids per round
    batch = mgrpo_batch(trajs)
    assert batch.groups == 2 and batch.zero_std == [True, True, False, True, True, False]

    roll, calls = _fake_roller([[flat, flat], [flat, flat]])
    assert asyncio.run(sample_groups(roll, 2, 2, signal_groups))[1:] == (2, 0)   # the cap
    roll, calls = _fake_roller([[flat, flat]])
    assert asyncio.run(sample_groups(roll, 2, 0, signal_groups))[1:] == (1, 0)   # off: one round

    # several ranks decide together: this rank's groups all have signal, but the other 3 ranks' have none,
    # so every rank goes on rolling (one rank alone would stop after its first round)
    answers = iter([8])                                                   # the target: 4 ranks x 2 groups

    def reduce_sum(n):
        return next(answers, None) or n                                   # the other ranks add nothing
    roll, calls = _fake_roller([[mixed, mixed], [mixed, mixed]])
    assert asyncio.run(sample_groups(roll, 2, 2, signal_groups, reduce_sum=reduce_sum))[1:] == (2, 4)


def test_task_curriculum_from_failures_draws_more_groups_where_the_policy_fails():
    """--rl-tasks failures (issue 99): each task's success follows the run's rollouts (the rate the first time a task
    is drawn, then (s + rate) / 2; a task not drawn keeps its s), the draw's weights are 1.1 - s, and step_tasks
    draws each group's task by them, a function of (seed, group): the same groups draw the same tasks, a failing
    task gets most groups, and without weights the tasks go in turn as before."""
    import levers
    from train_mgrpo import Levers
    tasks, on = _tasks(3), Levers(rl_tasks="failures")
    trajs = [t for g, (task, r) in enumerate([(0, [1.0, 1.0]), (1, [0.0, 0.0]), (0, [1.0, 0.0])])
             for t in _group(g, tasks[task].task_id, r)]
    success = levers.task_success(None, trajs, tasks, on)
    assert success == [0.75, 0.0, None]
    assert levers.task_success(success, trajs[:2], tasks, on) == [0.875, 0.0, None]
    assert levers.task_success(success, trajs, tasks, Levers()) is None        # off: nothing followed
    weights = levers.task_weights(success, 3, on)
    assert weights == pytest.approx([0.35, 1.1, 1.1]) and levers.task_weights(success, 3, Levers()) is None
    assert levers.task_weights(None, 3, on) == [1.1] * 3                       # nothing seen yet: uniform
    drawn = [t.task_id for t in step_tasks(tasks, 0, 300, 0, weights=weights)]
    assert drawn == [t.task_id for t in step_tasks(tasks, 0, 300, 0, weights=weights)]
    counts = [drawn.count(t.task_id) for t in tasks]
    assert counts[0] < 0.5 * counts[1] and counts[0] < 0.5 * counts[2], counts
    assert [t.task_id for t in step_tasks(tasks, 0, 6, 0)] == [t.task_id for t in tasks] * 2


def test_linear_warmup():
    s = optim.linear_warmup(4)
    assert [s(k) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert optim.linear_warmup(0)(0) == 1.0


@pytest.mark.parametrize("tied", [True, False])
def test_action_logprobs_equal_the_full_vocabulary_ones_and_their_gradients(tied):
    """logprobs.action_logprobs (the action tokens' rows only, the softmax in chunks) against the plain
    definition (logprobs.token_logprobs: full-vocabulary logits everywhere): the same log-probs and entropies
    on the masked positions, 0 elsewhere, and the same gradient of an Eq. 2-style weighted loss, in chunks of 5
    tokens (so several chunks, and one cut mid-action), with right padding and a row without actions. A batch
    without any action token gives zeros and still a gradient path through every parameter (zeros)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    model = Qwen2ForCausalLM(cfg).float()
    lengths, spans = [23, 17, 9], [[(5, 9), (15, 23)], [(10, 17)], []]
    ids, attn, mask = logprobs.pad_batch(
        [torch.randint(0, 300, (n,)).tolist() for n in lengths],
        [[int(any(a <= t < b for a, b in sp)) for t in range(n)] for n, sp in zip(lengths, spans)], pad_id=0)
    weight = torch.rand(ids.shape)

    def run(fn):
        model.zero_grad()
        logp, ent, *_ = fn()
        (-(logp * weight * mask).sum()).backward()
        return logp.detach(), ent, [p.grad.clone() for p in model.parameters()]
    full_lp, full_ent, full_grads = run(lambda: logprobs.token_logprobs(model, ids, attn))
    with torch.no_grad():
        argmax = model(input_ids=ids, attention_mask=attn).logits[:, :-1].argmax(-1) == ids[:, 1:]
        top1 = logprobs.action_logprobs(model, ids, attn, mask)[2]
    assert torch.equal(top1[:, 1:].bool(), argmax & mask[:, 1:].bool())
    lp, ent, grads = run(lambda: logprobs.action_logprobs(model, ids, attn, mask, chunk_tokens=5))
    on = mask.bool()
    assert int(on.sum()) == 19
    torch.testing.assert_close(lp[on], full_lp[on], rtol=0, atol=1e-5)
    torch.testing.assert_close(ent[on], full_ent[on], rtol=0, atol=1e-5)
    assert (lp[~on] == 0).all() and (ent[~on] == 0).all()
    for g, g_full in zip(grads, full_grads):
        torch.testing.assert_close(g, g_full, rtol=1e-4, atol=1e-6)
    with torch.no_grad():                                  # the reference / old-policy path
        no_grad_lp = logprobs.action_logprobs(model, ids, attn, mask)[0]
        torch.testing.assert_close(no_grad_lp[on], full_lp[on], rtol=0, atol=1e-5)
    lp, ent, grads = run(lambda: logprobs.action_logprobs(model, ids, attn, torch.zeros_like(mask)))
    assert (lp == 0).all() and (ent == 0).all()
    assert all(g is not None and (g == 0).all() for g in grads) and len(grads) == len(list(model.parameters()))


def test_packed_logprobs_equal_a_row_per_sample_and_their_gradients():
    """logprobs.packed_logprobs (the samples of one context in one row: the context once, then each action
    attending to it and to itself) against logprobs.forward_logprobs (a row per sample) and the textbook
    logprobs.plain_logprobs (a row per sample, every position's logits): the same log-probs and
    entropies on every action token and the same gradient of a weighted loss, with contexts shared by 3, 2 and 1
    samples, actions of 1 to 7 tokens, a mask with a gap, and a zero-weight filler; the model sees one row per
    context, with a 4D mask where a row holds several actions and the padding's alone where none does. (A mask
    that let an action see the actions before it in its row fails it: the 7-token action, its context's third,
    moved by 0.16.)"""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).float()
    assert logprobs.shares_contexts(model)
    ctx = [torch.randint(3, 300, (n,)).tolist() for n in (12, 20, 7)]
    acts = [[torch.randint(3, 300, (n,)).tolist() for n in lengths] for lengths in ((4, 1, 7), (3, 6), (5,))]
    samples = [Sample(c + a, [0] * len(c) + [1] * len(a)) for c, group in zip(ctx, acts) for a in group]
    samples[4].mask[-3] = 0                                                # a gap inside an action
    samples = [samples[i] for i in (3, 0, 5, 1, 4, 2)] + [Sample([0, 0], [0, 0])]   # groups interleaved; a filler
    weight = torch.rand(len(samples))
    widths = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: widths.append((len(kw["input_ids"]),
                                                                            kw["attention_mask"].dim())),
                                           with_kwargs=True)

    def run(fn):
        model.zero_grad()
        logp, ent, mask = fn()
        (-(logp * mask * weight[:, None]).sum()).backward()
        on = mask.bool()
        return [row[m] for row, m in zip(logp.detach(), on)], [row[m] for row, m in zip(ent, on)], \
            [p.grad.clone() for p in model.parameters()]
    rows_lp, rows_ent, rows_grads = run(lambda: logprobs.forward_logprobs(model, samples, 0, "cpu", 0.7))
    lp, ent, grads = run(lambda: logprobs.packed_logprobs(model, samples, 0, "cpu", 0.7))
    two = [samples[2], samples[0]]                                         # two contexts, one action each
    lone = [logprobs.packed_logprobs(model, two, 0, "cpu", 0.7), logprobs.forward_logprobs(model, two, 0, "cpu", 0.7)]
    hook.remove()
    plain_lp, plain_ent, plain_grads = run(lambda: logprobs.plain_logprobs(model, samples, 0, "cpu", 0.7))
    assert widths == [(7, 2), (4, 4), (2, 2), (2, 2)]   # rows: per sample, per context (4D mask), per sample twice
    for a, b, c, d in zip(lp, plain_lp, ent, plain_ent):                  # the textbook: every position's logits
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        torch.testing.assert_close(c, d, rtol=0, atol=1e-5)
    for g, want in zip(grads, plain_grads):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-6)
    for a, m, b, mb in zip(lone[0][0], lone[0][2], lone[1][0], lone[1][2]):
        torch.testing.assert_close(a[m.bool()], b[mb.bool()], rtol=0, atol=1e-5)
    assert [len(x) for x in lp] == [3, 4, 5, 1, 5, 7, 0]
    for a, b, c, d in zip(lp, rows_lp, ent, rows_ent):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
        torch.testing.assert_close(c, d, rtol=0, atol=1e-5)
    for g, want in zip(grads, rows_grads):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-6)


def test_packed_gradient_is_the_same_bits_run_after_run_on_two_threads():
    """The update's gradient is a function of its inputs on a multi-threaded CPU: one context shared by 48 actions
    repeats its last position 48 times among the scored positions, and the backward of ``hidden[rows, cols]``
    added those repeats with atomic adds across torch's threads, in an order that varied from run to run (one run
    of four of make demo's M-GRPO drew its step-2 gradient differently in the last bits; this test's runs, on that
    code, differed from the first in 7 of 10: 5 all equal to it by chance ~0.2%). ``_scored`` takes them by
    index_select, whose backward adds in index order."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=300, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2)).float()
    ctx = torch.randint(3, 300, (30,)).tolist()
    samples = [Sample(ctx + a, [0] * len(ctx) + [1] * len(a)) for a in torch.randint(3, 300, (48, 6)).tolist()]
    weight = torch.rand(len(samples))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)             # (48 x 6 positions x 128 features: the size at which torch parallelises)
    try:
        grads = []
        for _ in range(6):
            model.zero_grad()
            logp, _, mask = logprobs.packed_logprobs(model, samples, 0, "cpu", 1.0)
            (-(logp * mask * weight[:, None]).sum()).backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    finally:
        torch.set_num_threads(threads)
    assert sum(not torch.equal(grads[0], g) for g in grads[1:]) == 0


def test_context_batches_keep_a_context_together():
    """The update's micro-batches: at most ``size`` samples, every sample once, a context's samples in one
    micro-batch unless they are more than ``size``, the contexts of one sample first, then shorter ones first."""
    ss = [Sample([1] * n + [2], [0] * n + [1]) for n in (5, 3, 5, 9, 3, 5, 5, 5, 5)]
    batches = logprobs.context_batches(ss, 4)
    assert sorted(i for b in batches for i in b) == list(range(9)) and max(map(len, batches)) <= 4
    assert batches == [[3, 1, 4], [0, 2, 5, 6], [7, 8]]     # the lone context first; context 5's 6 split: 4 and 2
    assert logprobs.context_batches([], 4) == []


# ---- pages: RL never replays a demonstration page, nor one that validates or tests it ----

def test_rl_pages_are_disjoint_from_demonstration_validation_and_test_pages():
    """Whatever --seed and however long the run (the cursor), a group's page is in env.RL_SEEDS: never a
    page demos.py demonstrates (its --split train range), a validation page (eval.py --seed-start 500000 ..)
    or a test page (env.EVAL_SEEDS). The first groups of a run once took seeds 0, 1, 2, ..., the very pages
    of the demonstrations BC had memorised."""
    import demos
    tasks = _tasks(3)
    demo = demos.SPLITS["train"]
    ranges = [demo, webenv.VALID_SEEDS, webenv.EVAL_SEEDS, webenv.RL_SEEDS, webenv.FINDINGS_SEEDS]
    assert all(a.stop <= b.start or b.stop <= a.start for i, a in enumerate(ranges) for b in ranges[i + 1:])
    assert set(webenv.PAGE_SETS.values()) == set(ranges[1:]) | {webenv.DEMO_SEEDS} and demo == webenv.DEMO_SEEDS
    assert [webenv.page_set(s) for s in (0, 100_000, 500_000, 1_000_049, 2_000_000, 3_000_000)] == [
        "demonstration", "RL", "validation", "held-out (development test set)", "held-out (fresh, the findings')",
        "outside the ranges"]
    assert webenv.VALID_SEEDS.start == 500_000 and webenv.VALID_SEEDS.stop == webenv.EVAL_SEEDS.start
    for seed, cursor in [(0, 0), (1, 37), (123_456, 10**9), (7, len(webenv.RL_SEEDS) - 2)]:
        pages = [t.seed for t in step_tasks(tasks, cursor, 64, seed)]
        assert all(p in webenv.RL_SEEDS for p in pages), (seed, cursor)
        assert len(set(pages)) == 64                                     # each group its own page
    assert not {t.seed for t in step_tasks(tasks, 0, 40, 0)} & set(range(20))   # make demo's 20 demos per task


def test_rl_pages_fix_the_pages_each_task_is_drawn_from():
    """--rl-pages N: task k of group k mod len(tasks) takes one of the first N RL pages, in turn; 1 puts every
    group of a task on one page; 0 (the default) is the run's fresh pages, unchanged."""
    tasks = _tasks(3)
    one = step_tasks(tasks, 0, 12, seed=4, pages=1)
    assert [t.task_id for t in one] == [t.task_id for t in step_tasks(tasks, 0, 12, seed=4)]
    assert {t.seed for t in one} == {webenv.RL_SEEDS[0]}
    two = step_tasks(tasks, 5, 12, seed=4, pages=2)
    assert {t.seed for t in two} == set(webenv.RL_SEEDS[:2])
    assert all(len({t.seed for t in two if t.task_id == k.task_id}) == 2 for k in tasks)
    assert step_tasks(tasks, 0, 12, seed=4, pages=0) == step_tasks(tasks, 0, 12, seed=4)


# ---- the update: identical samples scored once; the weight push's order ----

@pytest.mark.parametrize("updates", [1, 2])
def test_identical_samples_scored_once_give_the_same_loss_and_gradient(updates):
    """train_mgrpo.update scores identical samples once (merge_identical): the same first action of
    several trajectories on their shared start page. Eq. 2's loss and its gradient through a real model are the same
    as with every sample scored: with one update per batch (ratio 1) samples merge whatever their advantages;
    with several (ratio != 1 after the first), only samples with equal advantages merge."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from logprobs import merge_identical
    from logprobs import forward_logprobs
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).double()
    ref = Qwen2ForCausalLM(model.config).double()
    a, b, c = Sample([1, 2, 3, 4], [0, 0, 1, 1]), Sample([1, 2, 5], [0, 0, 1]), Sample([7, 8, 9, 10, 11], [0, 0, 0, 1, 1])
    samples = [a, b, Sample(list(a.ids), list(a.mask)), c, Sample(list(a.ids), list(a.mask)), Sample(list(b.ids), list(b.mask))]
    adv = [1.2, 1.2, 1.2, -0.4, -0.9, 0.3]
    weight = [0.1, 0.05, 0.2, 0.3, 0.15, 0.2]
    shift = 0.0 if updates == 1 else 0.3                                   # old != current: ratio != 1

    def loss_and_grad(ss, aa, ww):
        model.zero_grad()
        logp, _, mask = forward_logprobs(model, ss, 0, "cpu")
        with torch.no_grad():
            ref_lp = forward_logprobs(ref, ss, 0, "cpu")[0]
        loss, _ = mgrpo_loss(logp, logp.detach() - shift * mask, ref_lp, mask, torch.tensor(aa, dtype=torch.float64),
                             torch.tensor(ww, dtype=torch.float64), clip_eps=0.2, beta=0.05)
        loss.backward()
        return float(loss.detach()), torch.cat([p.grad.flatten() for p in model.parameters()])

    merged = merge_identical(samples, adv, weight, same_advantage=updates > 1)
    assert len(merged[0]) == (3 if updates == 1 else 5)
    want, got = loss_and_grad(samples, adv, weight), loss_and_grad(*merged)
    assert got[0] == pytest.approx(want[0], rel=1e-6)                       # (action log-probs are fp32)
    assert float((got[1] - want[1]).norm() / want[1].norm()) < 1e-5 and float(want[1].norm()) > 1e-3
    assert sum(merged[2]) == pytest.approx(sum(weight))


def test_sync_weights_frees_the_cache_wakes_weights_pushes_then_wakes_the_kv_cache(monkeypatch):
    """CUDA only, so at rule level (sleep mode is off on the CPU engine; tests/test_vllm.py pushes into a real
    one): after an update the trainer hands its cached GPU memory back before vLLM allocates anything, wakes the
    engine's weights, pushes the new ones, and only then re-allocates the KV cache, so the push's gather
    buffers and the cache are never on the GPU together."""
    from engines import vllm_backend
    calls = []

    class Engine:
        async def sleep(self, level):
            calls.append(("sleep", level))

        async def wake_up(self, tags=None):
            calls.append(("wake_up", tags))

    async def push(backend, model):
        calls.append(("push", model))

    monkeypatch.setattr(optim, "free_cached_memory", lambda: calls.append(("free_cached_memory",)) or 0)
    monkeypatch.setattr(vllm_backend, "push_weights_to_vllm", push)
    backend = vllm_backend.VLLMBackend(engine=Engine(), tokenizer=None, sleep_mode=True, stop_ids=[0])
    asyncio.run(sync_weights(backend, "model"))
    assert calls == [("free_cached_memory",), ("wake_up", ["weights"]), ("push", "model"), ("wake_up", ["kv_cache"])]


# ---- GiGPO (--advantage gigpo): each action's return against the other actions taken from the same state ----

def _walk(group: int, reward: float, states: list[str]) -> Trajectory:
    """A trajectory through pages ``states`` (one action each, one token per action)."""
    t = Trajectory(group=group, task_id="t", seed=0, reward=reward)
    for j, page in enumerate(states):
        t.samples.append(Sample([1, 2, 10 + j], [0, 0, 1]))
        t.steps.append({"url": "http://x.test/", "observation": page, "parse_error": False})
    return t


def test_gigpo_step_advantages_worked_out_by_hand():
    """Four trajectories share their start page S; two successes go on through page A (one of them needs a
    third step), a failure through B. gamma 0.5: the returns are gamma^(steps left) x reward. Step groups:
    S = {0.5, 0, 0.25, 0} (mean 0.1875, population std sqrt(0.04296875)), A = {1.0 (t0, last step), 0.5 (t2,
    one step before its last)} = +-1; B and A2 are visited once (singletons: 0). omega 1 adds them to the
    episode advantages +-1."""
    from levers import step_advantages
    trajs = [_walk(0, 1.0, ["S", "A"]), _walk(0, 0.0, ["S", "B"]), _walk(0, 1.0, ["S", "A", "A2"]),
             _walk(0, 0.0, ["S"])]
    std_s = math.sqrt(0.04296875)
    s_adv = [0.3125 / std_s, -0.1875 / std_s, 0.0625 / std_s, -0.1875 / std_s]
    step, shared, differ = step_advantages(trajs, gamma=0.5)
    want = [[s_adv[0], 1.0], [s_adv[1], 0.0], [s_adv[2], -1.0, 0.0], [s_adv[3]]]
    assert (shared, differ) == (2, 2)                                     # S and A; B, A2 are singletons
    for got, exp in zip(step, want):
        assert got == pytest.approx(exp, abs=1e-5)

    batch = mgrpo_batch(trajs, Credit("gigpo", omega=1.0, gamma=0.5))
    episode = [1.0, 1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0]                 # A_i of each action, in order
    assert batch.adv == pytest.approx([e + s for e, s in zip(episode, sum(want, []))], abs=1e-5)
    assert batch.weight == mgrpo_batch(trajs).weight                      # Eq. 2's weights are unchanged
    assert (batch.step_groups, batch.step_groups_differ) == (2, 2)
    half = mgrpo_batch(trajs, Credit("gigpo", omega=0.5, gamma=0.5))
    assert half.adv == pytest.approx([e + 0.5 * s for e, s in zip(episode, sum(want, []))], abs=1e-5)


def test_gigpo_gives_all_success_groups_a_signal_and_leaves_all_failures_out():
    """All successes: GRPO sees equal rewards (no signal, the group leaves the loss); GiGPO still prefers the
    shorter way from the shared start page (returns 1 and gamma: +1 and -1), and the second trajectory's later
    step, from a page nobody else saw, gets 0. All failures: every return is 0, no signal either way. An
    environment failure stays out of its group (its samples too), as in GRPO."""
    ok = [_walk(0, 1.0, ["S"]), _walk(0, 1.0, ["S", "X"])]
    fail = [_walk(1, 0.0, ["S"]), _walk(1, 0.0, ["S", "Y"])]
    crashed = _walk(0, 1.0, ["S", "Z", "W"])
    crashed.env_error = True
    trajs = ok + fail + [crashed]
    assert mgrpo_batch(trajs).groups == 0
    g = mgrpo_batch(trajs, Credit("gigpo"))
    assert g.groups == 1 and g.zero_std == [False, True]
    assert g.adv == pytest.approx([1.0, -1.0, 0.0], abs=1e-4)                # (+-0.025 / (0.025 + eps))
    assert g.samples == ok[0].samples + ok[1].samples


def test_gigpo_with_omega_zero_is_grpo_and_its_step_advantages_reach_the_loss():
    """omega 0 gives Eq. 2's batch exactly (same samples, advantages and weights). With omega 1, the gradient of
    the loss with respect to each action's log-prob is -weight x (A_i + A^S_ij) (ratio 1, beta 0): the two
    first actions of one trajectory pair that share an advantage under GRPO are pushed apart."""
    rng = random.Random(3)
    trajs = []
    for g in range(3):
        for i in range(4):
            states = ["S"] + [rng.choice("ABC") for _ in range(rng.randint(0, 3))]
            trajs.append(_walk(g, float(rng.random() < 0.5), states))
    grpo = mgrpo_batch(trajs)
    zero = mgrpo_batch(trajs, Credit("gigpo", omega=0.0))
    assert (zero.samples, zero.adv, zero.weight, zero.groups) == (grpo.samples, grpo.adv, grpo.weight, grpo.groups)

    gigpo = mgrpo_batch(trajs, Credit("gigpo"))
    assert gigpo.adv != grpo.adv
    logp = torch.full((len(gigpo.samples), 1), -1.0, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(logp)
    loss, _ = mgrpo_loss(logp, logp.detach(), None, mask, torch.tensor(gigpo.adv, dtype=torch.float64),
                         torch.tensor(gigpo.weight, dtype=torch.float64), beta=0.0)
    loss.backward()
    want = [-w * a for w, a in zip(gigpo.weight, gigpo.adv)]
    assert logp.grad[:, 0].tolist() == pytest.approx(want, abs=1e-12)
