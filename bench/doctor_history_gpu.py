import sys
sys.path.insert(0, ".")
sys.path.insert(0, "tests/specscope")
from engine.session import open_runtime
import specscope.doctor as D
rt = open_runtime("/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf", "cuda", "bfloat16")
r = D._Report(); D._history_line(r, rt); print("real staging ->", r.finish())
import engine.model.graphs as graphs, torch
buf = {}
def racy(n, pinned):
    return buf.setdefault((n, pinned), torch.zeros(n, dtype=torch.long, pin_memory=pinned)).zero_()
graphs.staging = racy
rt2 = open_runtime("/tmp/model/SmolLM2-135M-Instruct.Q4_1.gguf", "cuda", "bfloat16")
r = D._Report(); D._history_line(r, rt2); print("racy staging (control, must FAIL) ->", r.finish())
