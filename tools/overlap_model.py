#!/usr/bin/python3
# tools/overlap_model.py
# A discrete-event model of one rank of a symmetric EP group running actors/step_pipeline: per
# layer and micro-batch ATTN-0, ATTN-1 (-> dispatch), SHARED, MLP (after the dispatch arrives,
# -> combine), COMBINE (after SHARED and the combine); one FIFO stream; one link port per sender
# (a message leaves when the port is free and holds it for its transfer time). With --split-mlp
# the MLP answers the peer first (prefill-sized batches, kernels/model answer_groups): its share
# of the MLP (--peer-share, half in a group of two), the combine leaves, then this rank's own
# tokens, which cross no link. It prints the
# share of min(compute, comm) that two micro-batches hide, both ways bench-cluster --overlap
# measures it (across runs, and in-trace: |compute ∩ port busy| / min(compute, comm)), for
# comm = compute and several combine : dispatch byte ratios: the ceiling of the design, without
# framework cost or noise.
#
#   /usr/bin/python3 tools/overlap_model.py            # stage times of the small preset (ms)
#   /usr/bin/python3 tools/overlap_model.py --stages 20 82 22 106 18 --layers 7
#   /usr/bin/python3 tools/overlap_model.py --layers 58          # DeepSeek-V3's depth
#   /usr/bin/python3 tools/overlap_model.py --stages 8 34 4 60 2 --split-mlp   # prefill, 2 x 256 tokens
import argparse
import heapq


def step_time(num_mb, layers, stages, dispatch, combine, peer_share=0.0):
    """(wall time of one step, compute intervals, port-busy intervals); stages = whole-batch costs
    (ATTN-0, ATTN-1, SHARED, MLP, COMBINE); peer_share > 0: the MLP computes the peer's tokens
    (that share of it) first, and the combine leaves before the rest."""
    cost = dict(zip(("A0", "A1", "S", "M", "C"), (x / num_mb for x in stages)))
    cost["Mp"], cost["M"] = cost["M"] * peer_share, cost["M"] * (1 - peer_share)
    dispatch, combine = dispatch / num_mb, combine / num_mb
    queue, events, seq = [], [], [0]
    port = [0.0]
    computing, sending = [], []
    shared_done, combined = [False] * num_mb, [False] * num_mb

    def at(t, kind, mb, payload):
        seq[0] += 1
        heapq.heappush(events, (t, seq[0], kind, mb, payload))

    def send(now, transfer, kind, mb, layer):
        start = max(now, port[0])
        port[0] = start + transfer
        sending.append((start, port[0]))
        at(port[0], kind, mb, layer)

    def begin(mb, layer):
        queue.extend([(mb, "A0", layer), (mb, "A1", layer)])

    for mb in range(num_mb):
        begin(mb, 0)
    now, busy = 0.0, False
    while True:
        if not busy and queue:
            mb, stage, layer = queue.pop(0)
            busy = True
            at(now + cost[stage], "done", mb, (stage, layer))
            computing.append((now, now + cost[stage]))
        if not events:
            return now, computing, sending
        now, _, kind, mb, payload = heapq.heappop(events)
        if kind == "done":
            busy = False
            stage, layer = payload
            if stage == "A1":
                send(now, dispatch, "dispatch", mb, layer)
                queue.append((mb, "S", layer))
            elif stage == "S":
                shared_done[mb] = True
                if combined[mb]:
                    queue.append((mb, "C", layer))
            elif stage == "Mp":              # the own share runs next, before anything else queued
                send(now, combine, "combine", mb, layer)
                queue.insert(0, (mb, "M", layer))
            elif stage == "M" and not peer_share:
                send(now, combine, "combine", mb, layer)
            elif stage == "C":
                shared_done[mb] = combined[mb] = False
                if layer + 1 < layers:
                    begin(mb, layer + 1)
        elif kind == "dispatch":
            queue.append((mb, "Mp" if peer_share else "M", payload))
        elif kind == "combine":
            combined[mb] = True
            if shared_done[mb]:
                queue.append((mb, "C", payload))


def in_trace(computing, sending):
    """|compute ∩ port busy| / min(compute, port busy), as bench-cluster's in-trace column."""
    both = sum(max(0.0, min(b, d) - max(a, c)) for a, b in computing for c, d in sending)
    return both / min(sum(b - a for a, b in computing), sum(d - c for c, d in sending))


def hidden(layers, stages, comm, ratio, peer_share):
    """(share hidden across runs, in-trace share with two micro-batches)."""
    dispatch = comm / (1 + ratio)
    combine = comm - dispatch
    runs = {(link, mb): step_time(mb, layers, stages, dispatch if link else 0, combine if link else 0, peer_share)
            for link in (False, True) for mb in (1, 2)}
    t = {key: run[0] for key, run in runs.items()}
    added = t[True, 1] - t[False, 1]
    compute = t[False, 2]
    return (compute + added - t[True, 2]) / min(compute, added), in_trace(*runs[True, 2][1:])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--stages", type=float, nargs=5, default=[0.82, 2.3, 1.1, 5.66, 0.16],
                   metavar=("ATTN0", "ATTN1", "SHARED", "MLP", "COMBINE"),
                   help="whole-batch stage times of one MoE layer (default: small preset, decode c=64)")
    p.add_argument("--layers", type=int, default=7, help="MoE layers per step")
    p.add_argument("--comm", type=float, default=1.0, help="communication / compute")
    p.add_argument("--split-mlp", action="store_true", help="the MLP answers the peer before its own tokens")
    p.add_argument("--peer-share", type=float, default=0.5, help="with --split-mlp: the peer's share of the MLP")
    a = p.parse_args()
    for ratio in (8, 4, 2, 1):
        share, trace_share = hidden(a.layers, a.stages, a.comm * sum(a.stages), ratio,
                                    a.peer_share if a.split_mlp else 0.0)
        print(f"combine bytes = {ratio} x dispatch bytes: two micro-batches hide {100 * share:.1f} % "
              f"(in-trace {100 * trace_share:.1f} %)")


if __name__ == "__main__":
    main()
