#!/bin/sh
# reward.json: 1 when /app/count.txt holds the number of words of input.txt (18), else 0.
mkdir -p /logs/verifier
count=$(tr -d ' \n' < /app/count.txt 2>/dev/null)
if [ "$count" = "18" ]; then reward=1; else reward=0; fi
printf '{"reward": %s, "count_file_present": %s}\n' "$reward" "$([ -f /app/count.txt ] && echo 1 || echo 0)" \
    > /logs/verifier/reward.json
