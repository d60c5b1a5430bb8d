"""The engine is not the trainer: samples keep the engine's log-probs, the update measures the mismatch and corrects
for it (train_mgrpo.rollout_correction, mismatch_sums). The correction's weights against a slow loop reference in
every mode; the engine's log-probs laid out as both scorings lay out the trainer's; and a real mismatch on the CPU:
a bf16 copy of the policy decoding beside a float32 trainer, against the float32 engine (the trainer's own module)."""
import asyncio
import math
import random
import types

import pytest
import torch

from engines import hf_backend
import logprobs
from rollout import Sample
from mismatch import engine_logprobs, mismatch_stats, mismatch_sums, rollout_correction
from train_mgrpo import mgrpo_loss

MODES = ("tis", "mis", "seq-tis", "seq-mis")


def slow_weights(old, eng, lengths, mode, cap):
    """Per action, per token: the correction's weight written out with Python loops."""
    out = []
    for o_row, e_row, n in zip(old, eng, lengths):
        log_rhos = [o_row[t] - e_row[t] for t in range(n)]
        if mode.startswith("seq-"):
            seq = math.exp(sum(log_rhos))
            rhos = [seq] * n
        else:
            rhos = [math.exp(x) for x in log_rhos]
        if mode.endswith("tis"):
            out.append([min(r, cap) for r in rhos])
        else:
            out.append([1.0 if 1.0 / cap <= r <= cap else 0.0 for r in rhos])
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode", MODES)
def test_correction_weights_equal_a_slow_reference(mode, seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 9) for _ in range(12)]
    T = max(lengths)
    old, eng, mask = (torch.zeros(len(lengths), T, dtype=torch.float64) for _ in range(3))
    for n, k in enumerate(lengths):
        for t in range(k):
            old[n, t] = rng.uniform(-4, 0)
            eng[n, t] = old[n, t] + rng.gauss(0, 0.5)   # ratios on both sides of [1/2, 2]
            mask[n, t] = 1.0
    got = rollout_correction(old, eng, mask, mode, cap=2.0)
    want = slow_weights(old.tolist(), eng.tolist(), lengths, mode, 2.0)
    for n, k in enumerate(lengths):
        assert got[n, k:].abs().sum() == 0
        for t in range(k):
            assert abs(float(got[n, t]) - want[n][t]) < 1e-6, (mode, n, t)
    kept = float((got > 0).sum() / mask.sum())
    assert 0.0 < kept <= 1.0 and (kept < 1.0 or mode.endswith("tis"))
    assert torch.equal(rollout_correction(old, eng, mask, "none", 2.0), mask)
    # the step's figures of the same ratios, written out: the share tis truncates, both sides of [1/2, 2], the spread
    rhos = [math.exp(o - e) for o_row, e_row, k in zip(old.tolist(), eng.tolist(), lengths)
            for o, e in zip(o_row[:k], e_row[:k])]
    mean = sum(rhos) / len(rhos)
    halves = [mismatch_sums(old[a:b], eng[a:b], mask[a:b], cap=1.5) for a, b in ((0, 6), (6, 12))]   # micro-batches
    stats = mismatch_stats(halves)
    assert stats["mismatch/ratio_truncated"] == pytest.approx(sum(r > 1.5 for r in rhos) / len(rhos))
    assert stats["mismatch/ratio_outside"] == pytest.approx(sum(not 0.5 <= r <= 2 for r in rhos) / len(rhos))
    assert stats["mismatch/ratio_std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in rhos) / len(rhos)))
    assert 0 < stats["mismatch/ratio_truncated"] < 1


def test_tis_reweights_eq2_terms_and_none_leaves_the_loss_as_it_was():
    """The weights enter each token's clipped term: with weights of 1 the loss is Eq. 2's; with TIS it is the
    weighted sum written out."""
    torch.manual_seed(0)
    logp, old, ref = (torch.rand(3, 4, dtype=torch.float64) * -3 for _ in range(3))
    eng = old + 0.3 * torch.randn(3, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    adv, w = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64), torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    plain, _ = mgrpo_loss(logp, old, ref, mask, adv, w, beta=0.0)
    ones, _ = mgrpo_loss(logp, old, ref, mask, adv, w, beta=0.0, is_weight=rollout_correction(old, eng, mask, "none", 2))
    assert torch.equal(plain, ones)
    is_w = rollout_correction(old, eng, mask, "tis", 2.0)
    tis, _ = mgrpo_loss(logp, old, ref, mask, adv, w, beta=0.0, is_weight=is_w)
    rho = torch.exp(logp - old)
    surr = torch.minimum(rho * adv[:, None], rho.clamp(0.8, 1.2) * adv[:, None])
    assert abs(float(tis) + float((surr * is_w * w[:, None] * mask).sum())) < 1e-12


@pytest.fixture(scope="module")
def small_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2)).float().eval()


def test_engine_logprobs_are_laid_out_as_both_scorings(small_model):
    """Samples whose engine log-probs are the trainer's own: engine_logprobs puts them where both the packed and the
    row-per-sample scorings put the trainer's, and the mismatch is then 0."""
    torch.manual_seed(1)
    ctx = [torch.randint(3, 300, (n,)).tolist() for n in (9, 14)]
    acts = [[torch.randint(3, 300, (n,)).tolist() for n in lengths] for lengths in ((4, 2), (6,))]
    samples = [Sample(c + a, [0] * len(c) + [1] * len(a)) for c, group in zip(ctx, acts) for a in group]
    with torch.no_grad():
        lp, _, mask = logprobs.forward_logprobs(small_model, samples, 0, "cpu")
    for s, row, m in zip(samples, lp, mask):
        s.logprobs = row[m.bool()].tolist()
    for score in (logprobs.forward_logprobs, logprobs.packed_logprobs):
        with torch.no_grad():
            logp, _, mask = score(small_model, samples, 0, "cpu")
        eng = engine_logprobs(samples, mask)
        torch.testing.assert_close(eng * mask, logp * mask, rtol=0, atol=1e-5)
        stats = mismatch_stats([mismatch_sums(logp, eng, mask)])
        assert stats["mismatch/max_abs_log_ratio"] < 1e-5 and stats["mismatch/ratio_outside"] == 0
    samples[0].logprobs = None
    assert engine_logprobs(samples, mask) is None


def _engine_mismatch(model, engine_dtype):
    """Sample 16 responses of 24 tokens at T = 1 from an HFBackend (the trainer's module, or a copy in
    ``engine_dtype``), then score them with the float32 trainer: the step's mismatch figures."""
    tok = types.SimpleNamespace(pad_token_id=0, decode=lambda ids, **kw: " ".join(map(str, ids)))
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=24, temperature=1.0, stop_ids=[], batch_window_s=0.01,
                                   engine_dtype=engine_dtype)
    prompts = [torch.randint(3, 300, (8 + i,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(16)]

    async def go():
        try:
            return await asyncio.gather(*(backend.generate(p, seed=1000 + i) for i, p in enumerate(prompts)))
        finally:
            await backend.aclose()
    gens = asyncio.run(go())
    samples = [Sample(p + g.ids, [0] * len(p) + [1] * len(g.ids), g.logprobs) for p, g in zip(prompts, gens)]
    with torch.no_grad():
        logp, _, mask = logprobs.packed_logprobs(model, samples, 0, "cpu")
    return mismatch_stats([mismatch_sums(logp, engine_logprobs(samples, mask), mask)])


def test_a_bf16_engine_makes_the_mismatch_real_and_the_float32_engine_has_none(small_model):
    """The issue's targets: the bf16 copy's token KL above the float32 engine's by >= 10x on the same prompts and
    noise; the float32 engine's largest |log ratio| below 1e-4."""
    f32 = _engine_mismatch(small_model, None)
    bf16 = _engine_mismatch(small_model, torch.bfloat16)
    assert f32["mismatch/max_abs_log_ratio"] < 1e-4
    assert bf16["mismatch/kl_k3"] >= 10 * max(f32["mismatch/kl_k3"], 1e-12)
    assert bf16["mismatch/max_abs_log_ratio"] > 1e-3 and bf16["mismatch/kl_k3"] > 0


def test_the_bf16_engine_takes_the_trainer_s_weights_after_an_update(small_model):
    """The trainer calls ``after_update`` in grad mode, with its parameters and the copy's leaves that require
    grad: the bf16 copy takes the new weights (as the float64 copy does) instead of raising, as it did in make
    demo's bf16 arm at its first step."""
    import copy
    model = copy.deepcopy(small_model)
    tok = types.SimpleNamespace(pad_token_id=0, decode=lambda ids, **kw: " ".join(map(str, ids)))
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=4, stop_ids=[], engine_dtype=torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)                                                   # an "update"

    async def sync():
        try:
            return await backend.after_update(model), [p.detach().clone() for p in backend.model.parameters()]
        finally:
            await backend.aclose()
    stats, copied = asyncio.run(sync())
    assert stats == {} and len(copied) == len(list(model.parameters()))
    for mine, theirs in zip(copied, model.parameters(), strict=True):
        assert mine.dtype == torch.bfloat16 and torch.equal(mine, theirs.detach().to(torch.bfloat16))


def test_bad_settings_fail_at_start_with_the_flag_named():
    """An unknown dtype, or a correction where the engine's log-probs are not the sampling distribution's (T or
    top-p not 1), is refused before anything runs; auto resolves to tis for vLLM and none for hf."""
    import policy
    from mismatch import resolve
    with pytest.raises(ValueError, match="--engine-dtype"):
        policy.make_backend("hf", "tiny", engine_dtype="bf16")
    with pytest.raises(SystemExit, match="--rollout-correction tis"):
        resolve("tis", "hf", 0.9, 1.0)
    assert [resolve("auto", b, 1.0, 1.0) for b in ("vllm", "hf")] == ["tis", "none"]
    assert resolve("auto", "vllm", 0.9, 1.0) == "none" and resolve("mis", "hf", 1.0, 1.0) == "mis"
