#!/bin/sh
wc -w < input.txt | tr -d ' ' > count.txt
