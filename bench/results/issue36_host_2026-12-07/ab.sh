#!/bin/bash
# Recreate the "before" side first: git worktree add /tmp/hp/before eb79e99 && cp bench/host_replay.py /tmp/hp/before/bench/
# before (eb79e99) and after (this tree), alternated, same bench file
cd /work/main
out=bench/results/issue36_host_2026-12-07
for i in 1 2 3; do
  for side in before after; do
    if [ $side = before ]; then dir=/tmp/hp/before; else dir=/work/main; fi
    (cd $dir && /work/main/.venv/bin/python bench/host_replay.py --rounds 3 --json /work/main/$out/$side-$i.json) 2>&1 | tail -4 | sed "s/^/$side $i: /"
  done
done
