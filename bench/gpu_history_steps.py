"""Which pass parts a used GPU runtime from a fresh one, and why? (issue 31; a diagnostic)

A fresh runtime plain-decodes a 2,000-token prompt step by step (one-row verify passes, the
graph bucket a plain run uses) and keeps each step's logits; a used runtime first decodes a
2,100-token prompt (through the Decoder, as a user would), then the same 2,000-token steps.
At every step both runtimes also run the same pass eagerly (graphs off, same cache state).
Printed: the first step whose logits differ (graph and eager, each side), the first committed
cache slot whose keys differ, and whether the RoPE tables agree.

    python3 bench/gpu_history_steps.py --model M [--dtype float32] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import gpu_exact_all as G  # noqa: E402
from engine.io.load import load_model  # noqa: E402
from engine.model.runtime import MAX_ROWS, Runtime, chain  # noqa: E402
from engine.speculation.decoder import Decoder  # noqa: E402


def steps(rt: Runtime, ids: list[int], n_new: int, eager_too: bool) -> dict:
    """Plain greedy decoding by hand on a session of rt: per step the graph logits and (if
    eager_too) the eager logits of the same pass; the session's committed keys at the end."""
    s = rt.session(len(ids) + n_new, spare=MAX_ROWS + 1)
    s.warm_up()
    s.prefill(ids[:-1])
    root, toks, graph_logits, eager_logits = ids[-1], [], [], []
    for _ in range(n_new):
        d, anc = chain(1)
        if eager_too:
            was, rt.use_graphs = rt.use_graphs, False
            eager_logits.append(s.verify([root], d, anc).logits[0].clone())
            rt.use_graphs = was
        lg = s.verify([root], d, anc).logits[0].clone()
        graph_logits.append(lg)
        root = int(lg.argmax())
        toks.append(root)
        s.commit([0])
    kv = s.cache.kv[:, :, :, :s.length].float().cpu().clone()
    info = dict(capacity=s.capacity, request_capacity=s.request_capacity,
                buckets=sorted(k[0] for k in s._buckets), prefills=sorted(s._prefills))
    s.close()
    return dict(tokens=toks, graph=graph_logits, eager=eager_logits, kv=kv, info=info)


def first(xs, ys) -> tuple[int | None, float]:
    for i, (x, y) in enumerate(zip(xs, ys)):
        if not torch.equal(x, y):
            return i, float((x - y).abs().max())
    return None, 0.0


def report(tag: str, F: dict, U: dict, P: int) -> None:
    print(f"--- {tag}", flush=True)
    print(f"fresh info {F['info']}\nused  info {U['info']}")
    t = next((i for i, (a, b) in enumerate(zip(F["tokens"], U["tokens"])) if a != b), None)
    print(f"first token difference: {t}")
    print(f"graph logits F vs U: first differing step {first(F['graph'], U['graph'])}")
    if F["eager"]:
        print(f"eager logits F vs U: {first(F['eager'], U['eager'])}")
        print(f"F graph vs F eager: {first(F['graph'], F['eager'])}")
        print(f"U graph vs U eager: {first(U['graph'], U['eager'])}")
    n = min(F["kv"].shape[3], U["kv"].shape[3])
    diff = (F["kv"][:, :, :, :n] - U["kv"][:, :, :, :n]).abs().amax(dim=(1, 2, 4))   # [L, n]
    bad = diff.nonzero()
    if len(bad):
        slot = int(bad[:, 1].min())
        layers = bad[bad[:, 1] == slot][:, 0].tolist()
        print(f"committed keys: first differing slot {slot} (prompt {P - 1} slots), layers "
              f"{layers[:8]}, max {float(diff[:, slot].max()):.3g}")
    else:
        print(f"committed keys: identical over {n} slots")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--no-eager", action="store_true")
    a = ap.parse_args()
    lm = load_model(a.model)
    pool = dict(G.prompt_pool(lm.tokenizer))
    P20, P21, P19 = pool["long-copy-2000"], pool["long-specbench-2100"], pool["long-chat-1900"]
    N = a.new_tokens
    eager = not a.no_eager

    F = Runtime(lm, a.device, a.dtype)
    ref = steps(F, P20, N, eager)
    cosF, sinF = F.model.cos.float().cpu(), F.model.sin.float().cpu()
    del F
    torch.cuda.empty_cache()

    U = Runtime(lm, a.device, a.dtype)
    Decoder(U, P21, G.settings_for("plain", N)).run()
    got = steps(U, P20, N, eager)
    L = min(cosF.shape[0], U.model.cos.shape[0])
    print(f"rope tables F {tuple(cosF.shape)} U {tuple(U.model.cos.shape)}: equal over {L} rows: "
          f"{torch.equal(cosF[:L], U.model.cos.float().cpu()[:L])} "
          f"{torch.equal(sinF[:L], U.model.sin.float().cpu()[:L])}")
    report(f"{a.dtype}: P2000 fresh vs P2000 after P2100 (Decoder plain)", ref, got, len(P20))

    # the same used runtime, a third request: the 1,900-token chat prompt after both
    got19 = steps(U, P19, N, False)
    del U
    torch.cuda.empty_cache()
    F2 = Runtime(lm, a.device, a.dtype)
    ref19 = steps(F2, P19, N, False)
    report(f"{a.dtype}: P1900 fresh vs P1900 third on the used runtime", ref19, got19, len(P19))
    return 0


if __name__ == "__main__":
    sys.exit(main())
