#!/bin/sh
# The reward is the fraction of cases /app/sum.sh gets right (1 when all pass).
mkdir -p /logs/verifier
passed=0
check() {
    expected=$1
    shift
    actual=$(sh /app/sum.sh "$@" 2>/dev/null)
    if [ "$actual" = "$expected" ]; then
        passed=$((passed + 1))
    else
        echo "sum.sh $*: expected $expected, got '$actual'" >&2
    fi
}
check 6 1 2 3
check 6 10 -4
check 42 42
check 3 -2 5
echo "$passed" | awk '{ printf "%.2f\n", $1 / 4 }' > /logs/verifier/reward.txt
