"""The command line: an ``Args`` dataclass parsed into flags (``parse_args``), and back into one flat dict for
logs (``args_dict``). Imports neither torch nor the project, so a script's ``--help`` answers at once."""
from __future__ import annotations

import dataclasses
import sys
from typing import Any


def parse_args(cls, argv: list[str] | None = None):
    """Parse the command line into an ``Args`` dataclass with ``tyro`` (as CleanRL's scripts do): one ``--flag``
    per field, its help the docstring written under the field, booleans as ``--x/--no-x``, ``Literal[...]``
    fields as choices. A field whose type is itself a dataclass (a config shared by several scripts, e.g.
    ``rollout.EpisodeConfig``) contributes its fields as flags of their own (``--temperature``, no prefix), with
    the defaults of the instance the script's ``Args`` builds. The ``--local_rank`` the deepspeed launcher
    appends is accepted and dropped; anything else unknown is an error."""
    import tyro   # here: the processes that import trainlib for its other parts never parse a command line
    argv = list(sys.argv[1:] if argv is None else argv)
    ranks = [k for k, a in enumerate(argv) if a.split("=")[0] in ("--local_rank", "--local-rank")]
    for k in reversed(ranks):
        del argv[k:k + (1 if "=" in argv[k] else 2)]
    return tyro.cli(cls, args=argv, config=(tyro.conf.OmitArgPrefixes,),
                    description=(cls.__doc__ or "").strip())


def args_dict(args) -> dict[str, Any]:
    """An ``Args`` instance as one flat dict (the flags and their values), for logs and results files."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(args):
        value = getattr(args, f.name)
        out.update(args_dict(value) if dataclasses.is_dataclass(value) else {f.name: value})
    return out


def answer_help(args, name: str) -> None:
    """``--help`` (or ``-h``) answered before the script imports torch and the model stack: a script calls it with its
    ``__name__`` right after its ``Args`` (or, for a script with its own argparse parser, the function that parses its
    command line, ``parser().parse_args``) and before those imports, so the help prints in well under a second.
    Nothing happens when the module is imported, or without the flag."""
    if name == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):
        parse_args(args) if dataclasses.is_dataclass(args) else args()   # prints the help and exits
