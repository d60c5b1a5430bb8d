"""bench/bench_grad_noise.py's arithmetic: per-group Eq. 2 gradients whose mean is the step's gradient, and the
noise statistics on gradients of known signal and noise."""
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_grad_noise as noise  # noqa: E402
import train_mgrpo  # noqa: E402
import logprobs  # noqa: E402
from rollout import Sample, Trajectory  # noqa: E402


def test_noise_stats_recover_a_known_noise_scale():
    """g_k = G + noise with |G|^2 = 1 and tr(Sigma) = 16: B_simple = 16 groups from single groups and from two
    batch sizes, and two halves of m groups have a cosine near 1 / (1 + 16 / m)."""
    torch.manual_seed(0)
    K, P, tr = 400, 4000, 16.0
    signal = torch.randn(P)
    signal /= signal.norm()
    grads = signal + torch.randn(K, P) * (tr / P) ** 0.5
    st = noise.noise_stats(grads, [4, 16, 64], splits=40, rng=random.Random(0))
    assert st["groups"] == K and st["b_simple_single"] == pytest.approx(tr, rel=0.2)
    for m, row in st["halves"].items():
        assert row["b_simple"] == pytest.approx(tr, rel=0.35)
        assert row["cos"] == pytest.approx(1 / (1 + tr / m), abs=0.08)
    assert st["halves"][4]["cos"] < st["halves"][16]["cos"] < st["halves"][64]["cos"]


def test_per_group_gradients_average_to_the_steps_eq2_gradient():
    """The bench's premise: a step over n informative groups follows the mean of their gradients taken alone
    (each group weighing 1), for GRPO's and GiGPO's advantages alike; a group without a signal has none."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1)).double()
    rng = random.Random(1)
    groups = []
    for g in range(4):
        members = []
        for i in range(3):
            t = Trajectory(group=g, task_id="t", seed=g, reward=float(g == 3 or (g < 2 and i == 0)))
            for j in range(rng.randint(1, 3)):
                t.samples.append(Sample([1, 2 + g, 3 + j, rng.randrange(5, 40)], [0, 0, 1, 1]))
                t.steps.append({"url": "u", "observation": f"page {g} {j}"})
            members.append(t)
        groups.append(members)              # groups 0, 1 mixed rewards; 2 all failures; 3 all successes
    args = noise.Args(micro_batch=2)
    grads = noise.group_gradients(model, groups, ["grpo", "gigpo"], 0, args)
    assert grads["grpo"].shape[0] == 2 and grads["gigpo"].shape[0] >= 2
    for mode in ("grpo", "gigpo"):
        batch = train_mgrpo.mgrpo_batch(sum(groups, []), train_mgrpo.Credit(mode))
        model.zero_grad()
        logp, _, mask = logprobs.forward_logprobs(model, batch.samples, 0, "cpu")
        loss, _ = train_mgrpo.mgrpo_loss(logp, logp.detach(), None, mask, torch.tensor(batch.adv, dtype=torch.float64),
                                         torch.tensor(batch.weight, dtype=torch.float64), beta=0.0)
        loss.backward()
        step = torch.cat([p.grad.flatten() for p in model.parameters()])
        assert grads[mode].shape[0] == batch.groups
        assert float((grads[mode].mean(0) - step).norm() / step.norm()) < 1e-6 and float(step.norm()) > 1e-4
