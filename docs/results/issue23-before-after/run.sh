#!/bin/bash
# Before/after issue 23: the old binary (HEAD 3f03982's release build) and the new one, interleaved, same machine.
cd /tmp/ba
OLD=/tmp/before/oversub; NEW=/tmp/after-oversub
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
