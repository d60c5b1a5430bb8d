#!/usr/bin/env bash
# Multi-node runs (`deepspeed --hostfile hostfile ...`): DeepSpeed's pdsh runner starts the other nodes' ranks
# with only a few of this shell's variables (those starting with PYTHON, NCCL, UCX, MLFLOW, MV2 and the
# accelerator's) plus the KEY=VALUE lines of .deepspeed_env in the launch directory or in ~. This writes that
# file from the variables the run needs: WA_* (WebArena's site URLs, docs/webarena.md), WEBAGENT_*, HF_*,
# TRANSFORMERS_*, VLLM_*, TORCH_EXTENSIONS_DIR, and any NAME given. DeepSpeed sends each as `export KEY=VALUE;`
# to the remote shell, in double quotes when it holds more than [\w@%+=:,./-], so a value with $ " ` \ or a
# newline cannot travel intact: refused here, by name. Run it in the directory you launch from:
#   bash scripts/deepspeed_env.sh [NAME ...]        # -> ./.deepspeed_env (DS_ENV_FILE renames it, as DeepSpeed)
# The file is readable by you alone: WEBAGENT_BROWSER_ENDPOINT's path is a browser server's secret token.
set -euo pipefail
umask 077
out=${DS_ENV_FILE:-.deepspeed_env}
# (not WEBAGENT_PROXY_HOST: a node's own address, docs/environment.md)
names=$(compgen -e | grep -E '^(WA_|WEBAGENT_|HF_|TRANSFORMERS_|VLLM_|TORCH_EXTENSIONS_DIR$)' | grep -vx WEBAGENT_PROXY_HOST || true)
: > "$out.tmp"
for name in $names "$@"; do
  [ -n "${!name+x}" ] || { echo "deepspeed_env: $name is not set" >&2; rm -f "$out.tmp"; exit 2; }
  case ${!name} in
    *'$'* | *'"'* | *'`'* | *'\'* | *$'\n'*)
      echo "deepspeed_env: $name holds \$ \" \` \\ or a newline, which DeepSpeed's export cannot carry" >&2
      rm -f "$out.tmp"; exit 2 ;;
  esac
  printf '%s=%s\n' "$name" "${!name}" >> "$out.tmp"
done
mv "$out.tmp" "$out"
echo "deepspeed_env: $(wc -l < "$out") variables -> $out ($(cut -d= -f1 "$out" | tr '\n' ' '))"
