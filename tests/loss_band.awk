# Compares two loss curves, given as lines "reference candidate" (paste of two files with one
# loss per line, in step order), and prints one verdict: "ok WORST%" or what is wrong.
#   -v steps=N      the number of steps both must have
#   -v band=X       every step within X (relative) of the reference
#   -v tail=X       the mean of the last 10% of the steps within X of the reference's
#   -v differ=1     the curves must not be identical (something really was rounded)
# Used by tests/test_precision_curves.sh and scripts/gpu_check.sh.
function abs(x) { return x < 0 ? -x : x }
{
    n++
    r = abs($2 - $1) / (abs($1) > 0 ? abs($1) : 1)
    if (r > worst) worst = r
    if ($1 != $2) differs = 1
    if (n > steps - int(steps / 10)) { tail_a += $1; tail_b += $2 }
}
END {
    if (n != steps) { print "has " n " steps, not " steps; exit }
    if (worst > band) { printf "a step is %.4f%% off the reference (band %g%%)\n", 100 * worst, 100 * band; exit }
    if (abs(tail_b - tail_a) / (abs(tail_a) > 0 ? abs(tail_a) : 1) > tail) {
        printf "the mean of the last %d steps is off by more than %g%%\n", int(steps / 10), 100 * tail; exit
    }
    if (differ && !differs) { print "equals the reference at every step: nothing was rounded"; exit }
    printf "ok %.4f%%\n", 100 * worst
}
