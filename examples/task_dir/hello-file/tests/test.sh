#!/bin/sh
# Reward 1 when /app/hello.txt holds exactly the expected line, else 0.
mkdir -p /logs/verifier
if [ -f /app/hello.txt ] && [ "$(cat /app/hello.txt)" = "Hello, agentcompass!" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "hello.txt is missing or holds something else" >&2
    echo 0 > /logs/verifier/reward.txt
fi
