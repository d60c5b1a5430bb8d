"""What the two trainers share, one module per job (train_bc.py and train_mgrpo.py keep the method on top):

- ``cli``: the command line, an ``Args`` dataclass parsed into flags (no torch: ``--help`` answers at once);
- ``distributed``: the process group (``python`` or the ``deepspeed`` launcher) and the collectives across ranks;
- ``optim``: the DeepSpeed config and engine, the reference model, one micro-batch's backward and step, the
  learning-rate schedules;
- ``lora``: LoRA adapters, and their merge for the exported checkpoint;
- ``checkpoints``: atomic checkpoints that resume (model, optimizer, RNG, the trainer's state);
- ``runlog``: metrics (JSONL, TensorBoard), their plots, the machine's description.

Dependencies run one way: ``distributed`` -> ``runlog`` -> ``checkpoints`` -> ``lora``; ``cli`` and ``optim`` import
none of them. Nothing here is specific to the method, and this file imports nothing, so ``from trainlib import
cli`` costs no torch. A plain ``python train_x.py`` works without the ``deepspeed`` launcher:
``distributed.init_distributed`` sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT for a single process.
"""
