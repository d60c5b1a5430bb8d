"""pip's configuration as `uv pip install` arguments, for `make setup`.

uv installs the same wheels as pip in well under half the time, but reads only its own configuration: a
machine whose pip is pointed at a mirror, local wheel folders or a constraints file (pip.conf, PIP_* variables)
would get other packages from uv. This prints those settings as uv's flags, one per line, taking them from
`pip config list` with pip's precedence (PIP_* over the `install` section over `global`). It exits 1 when pip is
configured with something it does not translate, and setup then installs with pip itself.
"""
import argparse
import ast
import subprocess
import sys

FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint", "no-index": "--no-index"}
HARMLESS = {"config-file", "cert", "default-timeout", "timeout", "disable-pip-version-check", "no-input",
            "progress-bar", "quiet", "verbose", "no-color", "root-user-action", "retries"}
RANK = {"global": 0, "install": 1, ":env:": 2}    # later ones win


def settings(listing: str) -> dict[str, str]:
    """`pip config list` lines (`global.find-links='/opt/wheels'`) -> {key: value} under pip's precedence."""
    chosen: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        if section not in RANK:
            continue                                       # download.*, wheel.*: not what install reads
        rank = RANK[section]
        if key not in chosen or chosen[key][0] <= rank:
            try:
                chosen[key] = (rank, str(ast.literal_eval(value)))
            except (ValueError, SyntaxError):
                raise ValueError(f"cannot read pip's setting {line!r}") from None
    return {key: value for key, (_, value) in chosen.items()}


def uv_args(config: dict[str, str]) -> list[str]:
    unknown = sorted(set(config) - set(FLAGS) - HARMLESS)
    if unknown:
        raise ValueError(f"pip is configured with {', '.join(unknown)}, which uv would not honour")
    args = []
    for key, flag in FLAGS.items():
        if key == "no-index":
            args += [flag] if config.get(key, "").lower() in ("1", "true", "yes", "on") else []
        else:
            args += [part for value in config.get(key, "").split() for part in (flag, value)]
    return args


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    try:
        if listing.returncode:
            raise ValueError(f"`pip config list` failed ({listing.stderr.strip()[-200:]})")
        print("\n".join(uv_args(settings(listing.stdout))))
    except ValueError as error:
        print(f"setup: {error}: installing with pip", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
