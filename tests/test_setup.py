"""`make setup`'s installs through uv: pip's configuration (files and PIP_* variables) becomes uv's flags, with
pip's precedence, a setting uv would not honour sends setup back to pip, and what is installed carries its
bytecode."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import uv_args  # noqa: E402  (scripts/ is not a package)


def test_pip_settings_become_uv_flags_with_pips_precedence():
    listing = "\n".join([
        "global.find-links='/opt/wheels'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.index-url='https://global.example/simple'",
        "install.index-url='https://install.example/simple'",
        ":env:.constraint='/etc/constraints.txt'",
        ":env:.cert='/etc/ssl/certs/ca-certificates.crt'",
        "download.proxy='http://only-for-download:3128'",       # another command's section: not install's
    ])
    config = uv_args.settings(listing)
    assert config["index-url"] == "https://install.example/simple"      # install over global
    assert uv_args.uv_args(config) == [
        "--index-url", "https://install.example/simple",
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels", "--constraint", "/etc/constraints.txt"]
    assert uv_args.uv_args(uv_args.settings(":env:.no-index='true'")) == ["--no-index"]
    assert uv_args.uv_args({}) == []
    with pytest.raises(ValueError, match="trusted-host"):
        uv_args.uv_args(uv_args.settings("global.trusted-host='mirror.local'"))
    with pytest.raises(ValueError, match="cannot read"):
        uv_args.settings("global.find-links=/no/quotes")


def test_the_script_reads_pips_real_configuration():
    """The script against pip itself, configured by PIP_* variables alone (PIP_CONFIG_FILE=/dev/null: no file);
    a setting it cannot translate exits 1, which setup.sh answers by installing with pip."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    environ.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="https://env.example/simple",
                   PIP_FIND_LINKS="/wheels/a /wheels/b", PIP_CERT="/etc/ssl/certs/ca-certificates.crt")
    run = subprocess.run([sys.executable, "scripts/uv_args.py"], cwd=ROOT, env=environ, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["--index-url", "https://env.example/simple", "--find-links", "/wheels/a",
                                  "--find-links", "/wheels/b"]
    run = subprocess.run([sys.executable, "scripts/uv_args.py"], cwd=ROOT, env=dict(environ, PIP_TRUSTED_HOST="m"),
                         capture_output=True, text=True)
    assert run.returncode == 1 and "trusted-host" in run.stderr and "installing with pip" in run.stderr


def test_installed_packages_carry_their_bytecode():
    """Setup compiles bytecode at install (pip does; uv with --compile-bytecode): where PYTHONDONTWRITEBYTECODE
    is set, as on the CI machines, a package without it is compiled from source again in every process that
    imports it, and the suite took 1,236 s instead of ~900 when uv installed without it."""
    import torch
    import transformers
    for module in (torch, transformers):
        assert Path(importlib.util.cache_from_source(module.__file__)).exists(), module.__file__
