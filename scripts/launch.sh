#!/usr/bin/env bash
# Turns FlagAI-style launch options into an mpirun line and runs it:
#
#   scripts/launch.sh --hostfile hosts --num-nodes 2 --gpus-per-node 4 -- \
#       build/bin/gpt2-classify --dataset mrpc --tp 2
#
# The hostfile lists one node per line, as FlagAI's does ("node1 slots=4"; a bare name gets
# --gpus-per-node slots). With --device cuda each rank takes the GPU of its local rank (once
# multi-process GPU runs are wired in). --dry-run prints the command instead of running it.
set -euo pipefail

usage() {
    echo "usage: scripts/launch.sh [--hostfile FILE] [--num-nodes N] [--gpus-per-node G] [--dry-run] -- PROGRAM [ARGS...]" >&2
    exit 2
}

hostfile="" nodes=1 per_node=1 dry=0
while [ $# -gt 0 ]; do
    case "$1" in
        --hostfile) hostfile=${2:?--hostfile needs a FILE}; shift 2 ;;
        --num-nodes) nodes=${2:?--num-nodes needs N}; shift 2 ;;
        --gpus-per-node) per_node=${2:?--gpus-per-node needs G}; shift 2 ;;
        --dry-run) dry=1; shift ;;
        --) shift; break ;;
        -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "launch.sh: unknown option '$1'" >&2; usage ;;
    esac
done
[ $# -gt 0 ] || usage
for v in "$nodes" "$per_node"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: '$v' is not a positive integer" >&2; exit 2; }
done

cmd=(mpirun -np $((nodes * per_node)) --map-by "ppr:${per_node}:node" --bind-to none)
if [ -n "$hostfile" ]; then
    [ -r "$hostfile" ] || { echo "launch.sh: --hostfile $hostfile: cannot read it" >&2; exit 1; }
    # keep the first --num-nodes hosts; give bare names --gpus-per-node slots
    tmp=$(mktemp)
    trap 'rm -f "$tmp"' EXIT
    grep -v '^[[:space:]]*\(#\|$\)' "$hostfile" | head -n "$nodes" |
        awk -v s="$per_node" '{ if ($0 ~ /slots=/) print; else print $1 " slots=" s }' > "$tmp"
    found=$(wc -l < "$tmp")
    [ "$found" -eq "$nodes" ] || { echo "launch.sh: $hostfile lists $found hosts, --num-nodes is $nodes" >&2; exit 1; }
    cmd+=(--hostfile "$tmp")
elif [ "$nodes" -gt 1 ]; then
    echo "launch.sh: --num-nodes $nodes needs --hostfile" >&2
    exit 2
fi
# forward the environment the ranks need, where it is set
for v in OMP_NUM_THREADS PATH LD_LIBRARY_PATH HF_HOME; do
    [ -n "${!v:-}" ] && cmd+=(-x "$v")
done
cmd+=("$@")

if [ "$dry" -eq 1 ]; then
    printf '%q ' "${cmd[@]}"
    echo
    [ -n "$hostfile" ] && sed 's/^/# hostfile: /' "$tmp"
else
    "${cmd[@]}"
fi
