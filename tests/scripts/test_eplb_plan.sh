#!/usr/bin/env bash
# tests/scripts/test_eplb_plan.sh
# `moeserve eplb-plan` on deepseek-ai/EPLB's README example (2 layers, 12 experts, 16 replicas,
# 4 groups, 2 nodes, 8 GPUs) prints the plan that README publishes, read back by Python's json.
# Run by CTest as: bash test_eplb_plan.sh <path-to-moeserve> <build-dir>
set -euo pipefail
moeserve=${1:?usage: test_eplb_plan.sh <moeserve> [build-dir]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/load.json" <<'JSON'
[[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
 [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
JSON
"$moeserve" eplb-plan --load "$tmp/load.json" --replicas 16 --groups 4 --nodes 2 --ranks 8 >"$tmp/plan.json"
/usr/bin/python3 - "$tmp/plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
# deepseek-ai/EPLB README: the output of rebalance_experts on this example
want_phy2log = [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]
assert plan["phy2log"] == want_phy2log, plan["phy2log"]
assert sorted(plan) == ["log2phy", "logcnt", "phy2log"], sorted(plan)
# logcnt counts each expert's slots; log2phy lists them, each slot holding that expert
for layer in range(2):
    row = want_phy2log[layer]
    assert plan["logcnt"][layer] == [row.count(e) for e in range(12)], plan["logcnt"][layer]
    for e, slots in enumerate(plan["log2phy"][layer]):
        used = [s for s in slots if s != -1]
        assert sorted(used) == [p for p, x in enumerate(row) if x == e], (layer, e, slots)
        assert len(slots) == max(plan["logcnt"][layer]), slots
print("eplb-plan: the README example's plan, as published")
PY
