#!/usr/bin/env bash
# harbor-venv.sh DIR: a virtual environment in DIR with Harbor (https://github.com/laude-institute/harbor)
# installed from PyPI, for the tests that check agentcompass against Harbor's own code (its ATIF
# trajectory models, its job folders). Harbor needs Python 3.12 or newer, which agentcompass does not:
# the first such interpreter found (on PATH, then pyenv's) makes it. Prints its python's path last.
set -euo pipefail
dir=$1
python=
for candidate in python3.13 python3.12 /root/.pyenv/versions/3.1[2-9]*/bin/python ~/.pyenv/versions/3.1[2-9]*/bin/python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
        python=$(command -v "$candidate")
        break
    fi
done
if [ -z "$python" ]; then
    echo "harbor-venv: no Python 3.12 or newer here (Harbor needs one): install one, or set AGENTCOMPASS_HARBOR_PYTHON" >&2
    exit 1
fi
"$python" -m venv "$dir"
"$dir/bin/pip" install --quiet --upgrade pip
# the version the tests were written against (its ATIF schema and job layout)
"$dir/bin/pip" install --quiet "harbor==${HARBOR_VERSION:-0.26.0}"
"$dir/bin/python" -c 'import harbor' 
echo "$dir/bin/python"
