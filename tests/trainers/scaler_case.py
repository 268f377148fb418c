"""A hand-written loop with torch's dynamic loss scaler (GradScaler),
recorded by gradeq_export.TorchRecorder(scaler=...), which reads the
scaler's settings and state. torch.amp.GradScaler runs on the CPU from torch
2.3, so this runs in the `current` environment of run_trainers.py.

    scaler_case.py CASE OUT GRADEQ_PYTHON_DIR

correct             scale, backward, unscale_, clip, step, update
clip_before_unscale the clip measures the scaled gradient (B14): it binds
                    where it should not
"""

import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

case, out, python_dir = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, python_dir)
import gradeq_export  # noqa: E402

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
rec = gradeq_export.TorchRecorder(out, model, opt, {"name": "scaler_" + case}, scaler=scaler)
g = torch.Generator().manual_seed(1)
split = [[2, 3, 3], [4, 4], [1, 5, 2], [3, 3, 2]]
for sizes in split:
    x, t = torch.randn(sum(sizes), 8, generator=g), torch.randn(sum(sizes), 3, generator=g)
    rec.begin_window(x, t)
    opt.zero_grad()
    first = 0
    for n in sizes:
        xb, tb = x[first:first + n], t[first:first + n]
        first += n
        rec.micro_batch(xb, tb)
        loss = F.mse_loss(model(xb), tb, reduction="sum") / 3 / len(x)
        scaler.scale(loss).backward()
    if case == "clip_before_unscale":
        rec.clip_grad_norm_(model.parameters(), 1.0)
        scaler.unscale_(opt)
    else:
        scaler.unscale_(opt)
        rec.clip_grad_norm_(model.parameters(), 1.0)
    rec.before_step()
    scaler.step(opt)
    scaler.update()
    rec.after_step()
rec.close()
print("torch %s, GradScaler from 2^10: %d windows recorded" % (torch.__version__, len(split)))
