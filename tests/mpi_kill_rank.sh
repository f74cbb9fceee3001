# Sourced by the MPI shell tests: kill_one_rank JOB LOG SAVE_DIR kills one rank of the mpirun
# job JOB (the gpt2-classify process training into SAVE_DIR) with SIGKILL once LOG shows a step,
# then waits up to 60 s for the whole job to end. Prints what went wrong and returns 1 when no
# rank was found, the job outlived the kill, or it exited 0.
kill_one_rank() {
    local job=$1 log=$2 dir=$3 victim rc
    for _ in $(seq 1 300); do # up to 30 s for training to start
        grep -aq "step [0-9]" "$log" 2>/dev/null && break
        sleep 0.1
    done
    victim=$(pgrep -f -- "--save-dir $dir" | while read -r p; do
        [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "gpt2-classify" ] && echo "$p"; done | tail -n 1)
    if [ -z "$victim" ]; then
        echo "FAILED: no rank to kill (training did not start?)"; cat "$log"; return 1
    fi
    kill -9 "$victim"
    for _ in $(seq 1 600); do # the others must be gone within 60 s
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$job" 2>/dev/null; then
        echo "FAILED: the job still runs 60 s after rank $victim was killed"; return 1
    fi
    wait "$job"
    rc=$?
    [ "$rc" -ne 0 ] || { echo "FAILED: the job exited 0 after a rank was killed"; return 1; }
}
