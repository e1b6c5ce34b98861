#!/bin/bash
# Before/after issue 36 (PoolSpec, one size parser/median/RNG, shared engine bookkeeping, the starter thread): the
# release binary of cf85829 (the HEAD the issue was filed against) and of b897761, interleaved, same machine.
# The commands are those of issue 23's run.sh, so the two tables can be read together.
set -u
cd "$(dirname "$0")"
OLD=${OLD:-/tmp/ba36/before-oversub}; NEW=${NEW:-/tmp/ba36/after-oversub}
for i in 1 2; do
  for b in old new; do
    BIN=$OLD; [ $b = new ] && BIN=$NEW
    $BIN bench paging --size 256MiB --samples 5 --store /var/tmp --json $b-paging-$i.json > $b-paging-$i.txt 2>&1
  done
done
for b in old new; do
  BIN=$OLD; [ $b = new ] && BIN=$NEW
  $BIN bench tenants --samples 3 --store-dir /var/tmp --json $b-tenants.json > $b-tenants.txt 2>&1
  $BIN bench interference --quick --part thrashing --json $b-thrash.json > $b-thrash.txt 2>&1
  OVERSUB_NO_PROGRESS=1 $BIN bench interference --part prem --iterations 30 --placement separate --interferers paging,copy --json $b-prem.json > $b-prem.txt 2>&1
done
echo done > DONE
