"""One Hugging Face Trainer run, recorded with gradeq_trainers.GradeqTrainerCallback.

    hf_case.py CASE OUT GRADEQ_PYTHON_DIR

Run by tests/trainers/run_trainers.py inside a virtual environment that
holds the pinned transformers (and torch). CASE picks the model and the
TrainingArguments; the loop is the Trainer's own.
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

case, out, python_dir = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, python_dir)
import gradeq_trainers  # noqa: E402
import transformers  # noqa: E402

POSITIONS, FEATURES, CLASSES, OUTPUTS = 6, 16, 11, 3


class TokenModel(nn.Module):
    """Token classification over padded sequences; the loss of a micro-batch
    is its summed token loss over the window's real tokens, which the Trainer
    hands over as num_items_in_batch (transformers >= 4.46); without it, over
    the micro-batch's own tokens."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, CLASSES))

    def forward(self, features, labels=None, **kwargs):
        logits = self.net(features)
        items = kwargs.get("num_items_in_batch")
        if items is None:
            items = (labels != -100).sum()
        loss = F.cross_entropy(logits.reshape(-1, CLASSES), labels.reshape(-1), ignore_index=-100, reduction="sum")
        return {"loss": loss / items, "logits": logits}


class TokenModelMeanLoss(nn.Module):
    """The same model written as most are: the mean token loss of its batch,
    and no **kwargs, so the Trainer never passes num_items_in_batch."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, CLASSES))

    def forward(self, features, labels=None):
        logits = self.net(features)
        loss = F.cross_entropy(logits.reshape(-1, CLASSES), labels.reshape(-1), ignore_index=-100)
        return {"loss": loss, "logits": logits}


class Regression(nn.Module):
    """MSE over the window's targets: summed over the micro-batch, divided by
    num_items_in_batch (every target element, none is -100)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 24), nn.ReLU(), nn.Linear(24, OUTPUTS))

    def forward(self, features, labels=None, **kwargs):
        y = self.net(features)
        items = kwargs.get("num_items_in_batch")
        if items is None:
            items = labels.numel()
        return {"loss": F.mse_loss(y, labels, reduction="sum") / items, "logits": y}


def token_data(samples, seed):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(samples):
        x = torch.randn(POSITIONS, FEATURES, generator=g)
        y = torch.randint(0, CLASSES, (POSITIONS,), generator=g)
        y[int(torch.randint(1, POSITIONS + 1, (), generator=g)):] = -100  # 1..6 real tokens
        rows.append({"features": x, "labels": y})
    return rows


def regression_data(samples, seed):
    g = torch.Generator().manual_seed(seed)
    return [{"features": torch.randn(FEATURES, generator=g), "labels": torch.randn(OUTPUTS, generator=g)}
            for _ in range(samples)]


# case: (model, data, samples, max_grad_norm, warmup)
CASES = {
    "token_num_items": (TokenModel, token_data, 16, 0.0, 0),
    "token_num_items_clip_warmup": (TokenModel, token_data, 18, 0.05, 1),  # 18 = 2 windows of 4 x 2, then 1
    "token_mean_loss": (TokenModelMeanLoss, token_data, 16, 0.0, 0),
    "regression_num_items_clip_warmup": (Regression, regression_data, 16, 0.05, 1),
}
make_model, data, samples, max_grad_norm, warmup = CASES[case]
torch.manual_seed(0)
model = make_model()
args = transformers.TrainingArguments(
    output_dir=out + "/trainer", per_device_train_batch_size=2, gradient_accumulation_steps=4, num_train_epochs=1,
    learning_rate=1e-2, weight_decay=0.0, max_grad_norm=max_grad_norm, lr_scheduler_type="cosine",
    warmup_steps=warmup, seed=0, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
    remove_unused_columns=False, dataloader_num_workers=0, use_cpu=True)
callback = gradeq_trainers.GradeqTrainerCallback(out, {"name": "hf_" + case})
trainer = transformers.Trainer(model=model, args=args, train_dataset=data(samples, 1), callbacks=[callback])
trainer.train()
print("transformers %s, torch %s: %d optimizer steps recorded" % (transformers.__version__, torch.__version__,
                                                                  callback.rec.window))
