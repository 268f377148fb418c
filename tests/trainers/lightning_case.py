"""One PyTorch Lightning run, recorded with gradeq_trainers.GradeqLightningCallback.

    lightning_case.py CASE OUT GRADEQ_PYTHON_DIR

Run by tests/trainers/run_trainers.py inside a virtual environment that
holds the pinned lightning and torch. CASE picks the module and the
Trainer's settings; the loop is Lightning's own.

Lightning divides each batch's loss by accumulate_grad_batches, N, in every
window, a partial last one included. So the correct module returns its
batch's summed loss times N over the window's item count, which the data
carries with each batch (`window_items`): Lightning's 1/N then leaves the
window's normalisation.
"""

import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

case, out, python_dir = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, python_dir)
import gradeq_trainers  # noqa: E402
import lightning.pytorch as pl  # noqa: E402

POSITIONS, FEATURES, CLASSES, OUTPUTS = 6, 16, 11, 3
N, BATCH = 4, 2
WARMUP = 1


class Module(pl.LightningModule):
    def __init__(self, token, window_normalised, schedule):
        super().__init__()
        self.token, self.window_normalised, self.schedule = token, window_normalised, schedule
        if token:
            self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, CLASSES))
        else:
            self.net = nn.Sequential(nn.Linear(FEATURES, 24), nn.ReLU(), nn.Linear(24, OUTPUTS))

    def training_step(self, batch, batch_idx):
        x, y, window_items = batch
        out = self.net(x)
        if self.token:
            summed = F.cross_entropy(out.reshape(-1, CLASSES), y.reshape(-1), ignore_index=-100, reduction="sum")
            items = (y != -100).sum()
        else:
            summed = F.mse_loss(out, y, reduction="sum") / OUTPUTS  # per row: the mean over the outputs
            items = y.shape[0]
        if self.window_normalised:  # Lightning divides by N: undo it, over the window's items
            return summed * self.trainer.accumulate_grad_batches / window_items[0]
        return summed / items  # the batch's mean, as most modules return it

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.0)
        if not self.schedule:
            return opt
        total = self.trainer.estimated_stepping_batches

        def multiplier(step):  # gradeq's warmup + cosine (docs/VERIFY.md)
            if step < WARMUP:
                return step / WARMUP
            return 0.5 * (1.0 + math.cos(math.pi * min((step - WARMUP) / (total - WARMUP), 1.0)))

        return {"optimizer": opt,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(opt, multiplier), "interval": "step"}}


def data(samples, token, seed):
    """(inputs, targets, the window's item count) per sample, in the order fed."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(samples):
        if token:
            x = torch.randn(POSITIONS, FEATURES, generator=g)
            y = torch.randint(0, CLASSES, (POSITIONS,), generator=g)
            y[int(torch.randint(1, POSITIONS + 1, (), generator=g)):] = -100  # 1..6 real tokens
        else:
            x, y = torch.randn(FEATURES, generator=g), torch.randn(OUTPUTS, generator=g)
        rows.append([x, y])
    window = N * BATCH
    for first in range(0, samples, window):  # a window's items, known before its first batch
        part = rows[first:first + window]
        items = sum(int((y != -100).sum()) for _, y in part) if token else len(part)
        for r in part:
            r.append(torch.tensor(items))
    return [tuple(r) for r in rows]


# case: (token model, window-normalised loss, samples, clip, schedule)
CASES = {
    "token_mean_loss": (True, False, 16, None, False),
    "token_window_normalised": (True, True, 16, None, False),
    "token_window_normalised_partial_window": (True, True, 20, None, False),  # windows of 4, 4, 2 batches
    "token_window_normalised_clip_warmup": (True, True, 16, 0.05, True),
    "regression_window_normalised_clip_warmup": (False, True, 20, 0.05, True),
    # Equal batch sizes: the batch mean over N is right in a full window, and
    # r/N of it in a partial one (Lightning 19987, B5).
    "regression_mean_loss_partial_window": (False, False, 20, None, False),
}
token, normalised, samples, clip, schedule = CASES[case]
torch.manual_seed(0)
module = Module(token, normalised, schedule)
loader = torch.utils.data.DataLoader(data(samples, token, 1), batch_size=BATCH, shuffle=False)
scenario = {"name": "lightning_" + case}
if schedule:
    scenario.update({"warmup_steps": WARMUP, "total_steps": math.ceil(samples / BATCH / N)})
callback = gradeq_trainers.GradeqLightningCallback(out, scenario)
trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, accumulate_grad_batches=N, gradient_clip_val=clip,
                     logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[callback])
trainer.fit(module, loader)
print("lightning %s, torch %s: %d optimizer steps recorded" % (pl.__version__, torch.__version__, callback.rec.window))
