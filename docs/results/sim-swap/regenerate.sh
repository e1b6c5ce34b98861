#!/bin/sh
# Regenerates every committed output of docs/sim-swap.md from the current default model. Run from the repository
# root with the release binary built (cargo build --release -p oversub-cli; OVERSUB=path overrides it). The
# flags are those each file was first made with.
set -eu
O=${OVERSUB:-target/release/oversub}
R=docs/results/sim-swap
"$O" sim swap --check --no-progress --json $R/results.json --plot $R > $R/output.txt
"$O" sim swap --no-progress --priorities contention > $R/output-contention.txt
"$O" sim swap --no-progress --evictable between-subtasks > $R/output-between-subtasks.txt
"$O" sim swap --check --no-progress --seed 1 > $R/output-seed1.txt
"$O" sim swap --no-progress --scenario fig6 --alpha-rule fraction,printed-ceil --policy paper > $R/output-alpha-rules.txt
for o in orig rev rot; do
  "$O" sim swap --no-progress --scenario-file $R/fig6-order/fig6-$o.toml --policy paper > $R/fig6-order/output-$o.txt
done
S=docs/results/sim-swap-fig6-scale
"$O" sim swap --no-progress --scenario fig6 --compute-scale 1,10,20,30,50,100,1000 > $S/literal.txt
"$O" sim swap --no-progress --scenario fig6 --compute-scale 1,10,20,30,50,100,1000 --priorities contention > $S/contention.txt
"$O" sim swap --no-progress --scenario fig6 --seed 1 --json $R/fig6-seed1.json > /dev/null
