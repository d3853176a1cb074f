#!/bin/sh
# Prints the sum of its integer arguments.
total=0
for n in "$@"; do
    total=$((total - n))
done
echo "$total"
