"""trainlib/overlap.py, the schedule of --async-steps (issue 100), with a fake engine and a fake update: which weights
draw each batch, that the engine's weights never change during a batch's rollouts, that the update runs beside the
rollouts in a thread of its own, and what a checkpoint keeps (the batch in flight, finished)."""
import asyncio
import threading
import time

import pytest

from trainlib.overlap import OneStepOff


class Fake:
    """A trainer whose weights are a version number and an engine that holds a copy of it; a batch records the
    engine's version at the start and the end of its rollouts, and when it ran."""

    def __init__(self, roll_s=0.05, update_s=0.05):
        self.trainer = self.engine = 0
        self.roll_s, self.update_s = roll_s, update_s
        self.syncs, self.rolling, self.spans = 0, False, {}

    async def roll(self):
        self.rolling, start, t0 = True, self.engine, time.time()
        await asyncio.sleep(self.roll_s)
        self.rolling = False
        return {"drawn_by": start, "still": self.engine, "span": (t0, time.time())}

    async def sync(self):
        assert not self.rolling, "the engine's weights changed during a batch's rollouts"
        self.engine, self.syncs = self.trainer, self.syncs + 1
        return {"sync/version": float(self.engine)}

    def update(self, batch):
        t0 = time.time()
        time.sleep(self.update_s)
        self.trainer += 1
        self.spans[self.trainer] = (t0, time.time(), threading.current_thread().name)
        return batch["drawn_by"]


async def _run(k, steps, fake, pending=None, stop_after=None, frozen=()):
    """``steps`` steps of the schedule; in the steps of ``frozen`` (1-based) nothing is learned (no update)."""
    sched, seen = OneStepOff(fake.roll, fake.sync, k, pending=pending), []
    try:
        for s in range(steps):
            batch, figures = await sched.next(last=s + 1 == steps)
            seen.append((batch, figures))
            if s + 1 in frozen:
                continue
            await sched.update(fake.update, batch)
            if not k:   # the trainer's after_update (train_mgrpo.train: at k = 0 the weights go over after the update)
                await fake.sync()
            if stop_after is not None and s + 1 == stop_after:
                return seen, await sched.settle()
        return seen, await sched.settle()
    finally:
        sched.close()


def test_one_step_off_draws_batch_s_with_the_weights_of_update_s_minus_2():
    fake = Fake()
    seen, left = asyncio.run(_run(1, 5, fake))
    drawn = [b["drawn_by"] for b, _ in seen]
    assert drawn == [0, 0, 1, 2, 3]                       # batch s (1-based) by the weights after update s - 2
    assert all(b["still"] == b["drawn_by"] for b, _ in seen)  # never weights in the middle of a batch
    assert all(f["async/staleness"] == 1.0 for _, f in seen)
    assert left is None and fake.trainer == 5               # nothing in flight after the last step
    assert fake.syncs == 5                                  # once after each update (the last: settle's)
    assert [f.get("sync/version") for _, f in seen] == [None, 1.0, 2.0, 3.0, 4.0]   # the sync's figures logged
    # the update runs in the update thread, overlapping the next batch's rollouts in the event loop
    assert {name for *_, name in fake.spans.values()} == {"update_0"}
    overlapped = [s for s in range(1, 4) if seen[s][0]["span"][0] < fake.spans[s][1]]
    assert overlapped == [1, 2, 3], (seen, fake.spans)


def test_no_sync_where_no_update_changed_the_weights():
    """A step that learns nothing (every group's rewards equal) leaves the trainer's weights as the engine holds
    them: no push (vLLM's costs seconds), and the schedule's batches are drawn as before."""
    fake = Fake()
    seen, _ = asyncio.run(_run(1, 5, fake, frozen={2, 3}))
    assert [b["drawn_by"] for b, _ in seen] == [0, 0, 1, 1, 1] and fake.trainer == 3
    assert fake.syncs == 3                                  # after the updates of steps 1, 4 and 5
    assert [f.get("sync/version") for _, f in seen] == [None, 1.0, None, None, 2.0]


def test_zero_steps_off_is_the_papers_step():
    fake = Fake()
    seen, left = asyncio.run(_run(0, 4, fake))
    assert [b["drawn_by"] for b, _ in seen] == [0, 1, 2, 3]   # every batch by the weights of the last update
    assert fake.syncs == 4 and left is None                 # the trainer's after_update only: the schedule none
    assert {name for *_, name in fake.spans.values()} == {threading.main_thread().name}


def test_a_stop_finishes_the_batch_in_flight_and_a_resume_takes_it():
    fake = Fake()
    seen, left = asyncio.run(_run(1, 6, fake, stop_after=3))
    assert left["drawn_by"] == 2 and fake.trainer == 3      # batch 4 was in flight, drawn by update 2's weights
    assert fake.engine == 3                                 # settled: the engine holds the trainer's weights
    # the resumed run (the trainer's weights from the checkpoint) takes the kept batch first, then goes on
    again = Fake()
    again.trainer = again.engine = 3
    resumed, _ = asyncio.run(_run(1, 3, again, pending=left))
    assert [b["drawn_by"] for b, _ in resumed] == [2, 3, 4]
    straight, _ = asyncio.run(_run(1, 6, Fake()))
    assert [b["drawn_by"] for b, _ in straight][3:] == [2, 3, 4]   # what the uninterrupted run drew


def test_only_zero_or_one_step_off():
    with pytest.raises(ValueError, match="async-steps 2"):
        OneStepOff(None, None, 2)


def test_one_step_off_corrects_with_tis_on_both_engines():
    """At K = 1 the samples are drawn by weights one update older than the trainer's: ``--rollout-correction auto``
    resolves to TIS (decoupled PPO's behaviour correction) where K = 0 with the HF engine has none; vLLM too."""
    import dataclasses

    import engines
    import mismatch
    import train_mgrpo
    one = train_mgrpo.Args(rollout_engine=engines.RolloutEngine(async_steps=1))
    assert mismatch.resolved(one).rollout_engine.rollout_correction == "tis"
    assert mismatch.resolved(train_mgrpo.Args()).rollout_engine.rollout_correction == "none"
    assert mismatch.resolved(dataclasses.replace(one, backend="vllm")).rollout_engine.rollout_correction == "tis"
    with pytest.raises(SystemExit, match="async-steps 2"):
        mismatch.resolved(train_mgrpo.Args(rollout_engine=engines.RolloutEngine(async_steps=2)))
