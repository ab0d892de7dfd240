#!/usr/bin/env bash
# Libraries of other commits for an A/B in one device call: for each git ref,
# builds libglyd.so (with that commit's committed fatbin) and copies it with
# that commit's python/ into build/ab/<ref, '/' -> '-'>/, which travels with
# build/ in `carry`. On the GPU machine:
#   PYTHONPATH=build/ab/exp-x/python GLYD_LIBRARY=build/ab/exp-x/libglyd.so \
#     python3 -m glyd.gpu bench --tables 1 ...
#   bash python/benchmarks/build_refs.sh main exp/x
set -euo pipefail
cd "$(dirname "$0")/../.."
for ref in "$@"; do
	name=${ref//\//-}
	wt=$(mktemp -d)
	git worktree add -q --detach "$wt" "$ref"
	(cd "$wt" && bash kernels/build.sh --check >/dev/null && make -s lib >/dev/null)
	rm -rf "build/ab/$name" && mkdir -p "build/ab/$name"
	cp "$wt/build/libglyd.so" "build/ab/$name/"
	cp -r "$wt/python" "build/ab/$name/python"
	find "build/ab/$name/python" -name __pycache__ -prune -exec rm -rf {} +
	git worktree remove --force "$wt"
	echo "build/ab/$name: $(git rev-parse --short "$ref")"
done
du -sh build/ab
