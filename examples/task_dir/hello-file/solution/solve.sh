#!/bin/sh
printf 'Hello, agentcompass!\n' > /app/hello.txt
