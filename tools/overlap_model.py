#!/usr/bin/python3
# tools/overlap_model.py
# A model of one rank of a symmetric EP group running actors/rank/step_pipeline's stream program: per
# layer and micro-batch ATTN-0, ATTN-1 (-> dispatch), MLP (once the dispatch arrived -> combine),
# SHARED, COMBINE (once the combine arrived), in the program's order (step_pipeline::start: every
# micro-batch's ATTN stages, the MLPs, then per micro-batch its SHARED, its COMBINE and its next
# layer; --order after-mlps runs both SHAREDs right after the MLPs, shared-first before them,
# beside the dispatches); one FIFO stream; one link port per sender (a message leaves when the
# port is free and holds it for its transfer time); the peer mirrors this rank, so a payload
# arrives when this rank's own does.
# With --split-mlp the MLP answers the peer first (prefill-sized batches, kernels/model
# answer_groups): its share of the MLP (--peer-share, half in a group of two), the combine
# leaves, then this rank's own tokens, which cross no link. --first-share gives micro-batch 0
# that share of every stage and message (prefill: actors/policy prefill_first_share). It prints the
# share of min(compute, comm) that two micro-batches hide as bench-cluster --overlap measures it
# (a step with the link against one without: tools/overlap_share.hpp; in-trace: |compute ∩ port
# busy| / min(compute, comm)), for comm = compute and several combine : dispatch byte ratios: the
# ceiling of the design, without framework cost or noise.
#
#   /usr/bin/python3 tools/overlap_model.py            # stage times of the small preset (ms)
#   /usr/bin/python3 tools/overlap_model.py --stages 0.8 2.34 0.42 4.16 0.1 --order shared-first
#   /usr/bin/python3 tools/overlap_model.py --layers 58          # DeepSeek-V3's depth
#   /usr/bin/python3 tools/overlap_model.py --stages 21 61 13 123 2 --split-mlp --first-share 0.53   # prefill
import argparse


def program(num_mb, layers, order):
    """The stream's stages in order, as step_pipeline::start enqueues them (all layers MoE);
    order: "own-combine" (step_pipeline: each SHARED just before its COMBINE), "after-mlps" (both
    SHAREDs between the MLPs and the COMBINEs), "shared-first" (the SHAREDs before the MLPs)."""
    prog = [(mb, st, 0) for mb in range(num_mb) for st in ("A0", "A1")]
    for layer in range(layers):
        if order == "shared-first":
            prog += [(mb, "S", layer) for mb in range(num_mb)]
        prog += [(mb, "M", layer) for mb in range(num_mb)]
        if order == "after-mlps":
            prog += [(mb, "S", layer) for mb in range(num_mb)]
        for mb in range(num_mb):
            if order == "own-combine":
                prog.append((mb, "S", layer))
            prog.append((mb, "C", layer))
            if layer + 1 < layers:
                prog += [(mb, "A0", layer + 1), (mb, "A1", layer + 1)]
    return prog


def step_time(num_mb, layers, stages, dispatch, combine, peer_share=0.0, order="own-combine", first_share=0.5):
    """(wall time of one step, compute intervals, port-busy intervals); stages = whole-batch costs
    (ATTN-0, ATTN-1, SHARED, MLP, COMBINE); peer_share > 0: the MLP computes the peer's tokens
    (that share of it) first, and the combine leaves before the rest; with two micro-batches,
    micro-batch 0 takes first_share of every stage and message."""
    shares = [1.0] if num_mb == 1 else [first_share, 1.0 - first_share]
    costs = [dict(zip(("A0", "A1", "S", "M", "C"), (x * f for x in stages))) for f in shares]
    dispatches, combines = [dispatch * f for f in shares], [combine * f for f in shares]
    now, port = 0.0, 0.0
    arrives = {}
    computing, sending = [], []

    def send(t, transfer, key):
        nonlocal port
        start = max(t, port)
        port = start + transfer
        sending.append((start, port))
        arrives[key] = port

    def run(start, duration):
        computing.append((start, start + duration))
        return start + duration

    for mb, stage, layer in program(num_mb, layers, order):
        cost, dispatch, combine = costs[mb], dispatches[mb], combines[mb]
        if stage == "M":
            start = max(now, arrives[("dispatch", mb, layer)])
            if peer_share:
                now = run(start, cost["M"] * peer_share)
                send(now, combine, ("combine", mb, layer))
                now = run(now, cost["M"] * (1 - peer_share))
            else:
                now = run(start, cost["M"])
                send(now, combine, ("combine", mb, layer))
        elif stage == "C":
            now = run(max(now, arrives[("combine", mb, layer)]), cost["C"])
        else:
            now = run(now, cost[stage])
            if stage == "A1":
                send(now, dispatch, ("dispatch", mb, layer))
    return now, computing, sending


def in_trace(computing, sending):
    """|compute ∩ port busy| / min(compute, port busy), as bench-cluster's in-trace column."""
    both = sum(max(0.0, min(b, d) - max(a, c)) for a, b in computing for c, d in sending)
    return both / min(sum(b - a for a, b in computing), sum(d - c for c, d in sending))


def hidden(layers, stages, comm, ratio, peer_share, order, first_share):
    """(share hidden, a step with the link against one without, in-trace share with two micro-batches)."""
    dispatch = comm / (1 + ratio)
    combine = comm - dispatch
    runs = {(link, mb): step_time(mb, layers, stages, dispatch if link else 0, combine if link else 0, peer_share,
                                  order, first_share)
            for link in (False, True) for mb in (1, 2)}
    t = {key: run[0] for key, run in runs.items()}
    # as tools/overlap_share.hpp: (comm - exposed) / min(compute, comm), the port's busy time
    # against the compute (every layer here is a MoE layer)
    busy, compute, exposed = layers * comm, t[False, 2], t[True, 2] - t[False, 2]
    return (busy - exposed) / min(compute, busy), in_trace(*runs[True, 2][1:])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--stages", type=float, nargs=5, default=[0.82, 2.3, 1.1, 5.66, 0.16],
                   metavar=("ATTN0", "ATTN1", "SHARED", "MLP", "COMBINE"),
                   help="whole-batch stage times of one MoE layer (default: small preset, decode c=64)")
    p.add_argument("--layers", type=int, default=7, help="MoE layers per step")
    p.add_argument("--comm", type=float, default=1.0, help="communication / compute")
    p.add_argument("--split-mlp", action="store_true", help="the MLP answers the peer before its own tokens")
    p.add_argument("--peer-share", type=float, default=0.5, help="with --split-mlp: the peer's share of the MLP")
    p.add_argument("--order", choices=("own-combine", "after-mlps", "shared-first"), default="own-combine",
                   help="where SHARED runs: just before its COMBINE (step_pipeline), both between the MLPs "
                        "and the COMBINEs, or both before the MLPs (beside the dispatches)")
    p.add_argument("--first-share", type=float, default=0.5,
                   help="micro-batch 0's share of the work (0.5: equal micro-batches)")
    a = p.parse_args()
    if not 0.0 < a.first_share < 1.0:
        p.error("--first-share must be in (0, 1)")
    for ratio in (8, 4, 2, 1):
        share, trace_share = hidden(a.layers, a.stages, a.comm * sum(a.stages), ratio,
                                    a.peer_share if a.split_mlp else 0.0, a.order, a.first_share)
        print(f"combine bytes = {ratio} x dispatch bytes: two micro-batches hide {100 * share:.1f} % "
              f"(in-trace {100 * trace_share:.1f} %)")


if __name__ == "__main__":
    main()
