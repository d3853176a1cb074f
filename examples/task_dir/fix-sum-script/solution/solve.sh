#!/bin/sh
# The loop subtracts instead of adding.
sed -i 's/total - n/total + n/' sum.sh
