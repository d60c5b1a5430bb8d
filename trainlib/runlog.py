"""The run's log: scalars per step to ``<out>/metrics.jsonl`` and TensorBoard (``Metrics``, rewound on a resume),
their plots (``plot_metrics``: dynamics.png), and the machine a run ran on (``machine``), which every log names."""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import torch

from trainlib.checkpoints import atomic_write

log = logging.getLogger("webagent")


def rewind_jsonl(path: str | Path, step: int) -> None:
    """Keep the lines of a per-step JSONL log with ``"step" <= step`` (all of them gone for step 0: a fresh
    run), so that a run resumed at ``step`` logs each later step once. Rewritten atomically."""
    path = Path(path)
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and step and json.loads(line)["step"] <= step]
    atomic_write(path, "".join(line + "\n" for line in keep))


class Metrics:
    """Scalars to <out>/metrics.jsonl and TensorBoard (<out>/tb), rank 0 only.

    ``m.log(step, {"train/loss": 1.2})``; each JSONL line is ``{"step": 3, "time": ..., "train/loss": 1.2}``.
    """

    def __init__(self, out_dir: str | Path, enabled: bool = True, start_step: int = 0):
        self.enabled = enabled
        self.path = Path(out_dir) / "metrics.jsonl"
        self.tb = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            rewind_jsonl(self.path, start_step)   # a resumed run redoes the steps after its checkpoint
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(Path(out_dir) / "tb"))
            except ImportError:   # tensorboard is optional at run time; JSONL always works
                log.warning("tensorboard not installed: metrics go to JSONL only")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "time": time.time(), **scalars}) + "\n")
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing moving average: entry i is the mean of values[i-window+1 .. i] (fewer at the start), e.g.
    ``moving_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]``."""
    return [sum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def plot_metrics(jsonl: str | Path, panels: list[tuple], out_png: str | Path, title: str = "",
                 smooth: int = 10) -> dict[str, tuple[list, list[float]]]:
    """One subplot per (metric key, y label[, smooth[, count key]]), against step; a panel's own third entry
    overrides ``smooth`` (1 for a sparse metric such as a periodic evaluation), and a fourth, the key of the
    number of episodes a success rate p is a fraction of, draws its standard error sqrt(p (1 - p) / n) as error
    bars (so that a change smaller than the bars reads as noise). Keys missing from the log are skipped. With
    ``smooth`` > 1 the raw values are drawn faint and a trailing moving average of ``smooth`` logged values
    (at most the number there are) over them, so that a trend stands out from step-to-step noise (RL steps
    rotate through tasks). A key ending in "/*" is a prefix: one moving-average line per key under it (e.g.
    "rollout/success/*", the success rate of each task). Returns key -> (steps, the plotted line's values), and
    "<key> SE" -> (steps, the error bars) for a panel with a count key."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = read_metrics(jsonl)

    def keys_of(key: str) -> list[str]:
        if not key.endswith("/*"):
            return [key] if any(key in r for r in rows) else []
        return sorted({k for r in rows for k in r if k.startswith(key[:-1])})

    panels = [(k, lab, keys, own[0] if own else smooth, own[1] if len(own) > 1 else None)
              for k, lab, *own in panels if (keys := keys_of(k))]
    plotted: dict[str, tuple[list, list[float]]] = {}
    if not panels:
        return plotted
    cols = min(len(panels), 4)
    rows_n = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4 * cols, 3.2 * rows_n), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (key, label, keys, smooth, count) in zip(axes.flat, panels):
        for k in keys:
            steps, values = map(list, zip(*[(r["step"], r[k]) for r in rows if k in r]))
            w = min(smooth, len(values))
            line = moving_average(values, w) if w > 1 else values
            plotted[k] = (steps, line)
            if key.endswith("/*"):           # several series: their moving averages only
                ax.plot(steps, line, linewidth=1.5, label=k[len(key) - 1:])
            elif w > 1:
                ax.plot(steps, values, alpha=0.3, linewidth=0.8, label="per step")
                ax.plot(steps, line, linewidth=2, label=f"moving average of {w} steps")
            elif count and all(count in r for r in rows if k in r):
                n = [r[count] for r in rows if k in r]
                se = [math.sqrt(p * (1 - p) / max(m, 1)) for p, m in zip(values, n)]
                ax.errorbar(steps, values, yerr=se, marker="o", capsize=3, label=f"+- SE, {n[-1]:g} episodes")
                plotted[f"{k} SE"] = (steps, se)
            else:
                ax.plot(steps, values, marker="o")
        if key.endswith("/*"):
            ax.set_title(f"moving average of (up to) {smooth} logged values each" if smooth > 1 else "", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6 if key.endswith("/*") else 7)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return plotted


def machine() -> str:
    """Where a run ran, for its log and results (``init_distributed`` logs it): torch's build, the CPU (its name,
    family and model, the instruction set torch's kernels dispatch to, its cores) and the GPUs where there are
    some. A run is a function of its command on one machine; another CPU's kernels may round otherwise
    (docs/training.md). Threads are the command's (``--torch-threads``)."""
    info: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break                                              # the first processor's fields are enough
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name += f", family {info['cpu family']} model {info['model']}"
    text = f"torch {torch.__version__}, CPU {name} ({torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores)"
    if torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}"
    return text
