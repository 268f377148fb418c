"""gradeq_trainers — record what a trainer does with your model, as a gradeq
window set, through the trainer's own extension points.

    trainer = transformers.Trainer(..., callbacks=[GradeqTrainerCallback("out", {"name": "my_run"})])
    trainer = lightning.Trainer(..., callbacks=[GradeqLightningCallback("out", {"name": "my_run"})])

Then `gradeq verify out`. The callbacks drive gradeq_export.TorchRecorder,
with its guarantees: the optimizer and its settings, the layers, the
split, the clip, the learning rate of every step and the schedule are read
from the trainer, not copied; the gradient is recorded after the last
micro-batch and before the clip; a window's micro-batches are the batches
the trainer drew for that optimizer step (its sampler defines the window).

The model the trainer trains holds the layers gradeq models as one
attribute (`layers`, default "net": a model as TorchRecorder takes it)
and computes its loss from their output; the batch holds the inputs and
the targets under `inputs` and `labels` (keys of a dict batch, or indices
of a tuple).
"""

import math

import gradeq_export


class GradientWatch:
    """The trained parameters' .grad as the last backward left it: kept
    after every backward, so that a trainer that clips before any hook we
    can reach still leaves the gradient before the clip."""

    def __init__(self, named_parameters):
        import torch

        self.latest = {}
        self.handles = []
        self._params = [(n, p) for n, p in named_parameters if p.requires_grad]
        for name, p in self._params:
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                self.handles.append(p.register_post_accumulate_grad_hook(self._keeper(name)))
            else:  # older torch: at the end of the backward, once .grad holds the sum
                engine = torch.autograd.Variable._execution_engine

                def hook(grad, name=name, p=p):
                    engine.queue_callback(lambda: self._keep(name, p))
                    return grad

                self.handles.append(p.register_hook(hook))

    def _keeper(self, name):
        return lambda p: self._keep(name, p)

    def _keep(self, name, p):
        self.latest[name] = None if p.grad is None else p.grad.detach().to("cpu").numpy().copy()

    def take(self):
        """The gradient since the last take(), by parameter name (None: no backward reached it)."""
        out = {name: self.latest.get(name) for name, _ in self._params}
        self.latest = {}
        return out

    def remove(self):
        for h in self.handles:
            h.remove()


def _part(batch, key, what):
    try:
        return batch[key]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the batch has no %s under %r (give inputs= / labels= the key or index that holds it)"
                         % (what, key)) from None


def _settings(scenario, layers):
    if scenario is not None and not isinstance(scenario, dict):
        raise ValueError("scenario must be a dict of gradeq config keys, got %s" % type(scenario).__name__)
    if not isinstance(layers, str):
        raise ValueError("layers= names the model's attribute that holds its layers, got %r" % (layers,))
    return dict(scenario or {})


def _compute_dtype(scenario, dtype, source):
    """The compute dtype a trainer's precision setting gives, into the scenario."""
    declared = scenario.get("compute_dtype", dtype)
    if declared != dtype:
        raise ValueError("scenario key compute_dtype = %r contradicts the trainer's %s (%s)" % (declared, source, dtype))
    scenario["compute_dtype"] = dtype


def _chain(model, layers):
    chain = getattr(model, layers, None)
    if chain is None:
        raise ValueError("the model has no attribute %r holding its layers (give layers= the attribute's name)"
                         % layers)
    return chain


class GradeqTrainerCallback:
    """A transformers.TrainerCallback that records the Trainer's run.

    directory: where the window set goes. scenario: gradeq config keys the
    trainer does not hold (at least "name"). layers, inputs, labels: see
    the module docstring.
    """

    def __new__(cls, *args, **kwargs):
        import transformers

        # A TrainerCallback subclass, made when transformers is there to derive from.
        if not issubclass(cls, transformers.TrainerCallback):
            cls = type(cls.__name__, (cls, transformers.TrainerCallback), {})
        return object.__new__(cls)

    def __init__(self, directory, scenario=None, layers="net", inputs="features", labels="labels"):
        self.directory, self.declared = directory, _settings(scenario, layers)
        self.layers, self.inputs, self.labels = layers, inputs, labels
        self.rec = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        import torch

        if args.gradient_accumulation_steps < 1:
            raise ValueError("gradient_accumulation_steps must be >= 1")
        if getattr(args, "fp16", False):
            raise ValueError("fp16=True: the loss scaler inside the Trainer's accelerator is not recorded yet")
        scenario = dict(self.declared)
        schedule = self._schedule(args, state)
        for key, value in schedule.items():
            if key in scenario and scenario[key] != value:
                raise ValueError("scenario key %s = %r contradicts the Trainer's %r" % (key, scenario[key], value))
            scenario[key] = value
        _compute_dtype(scenario, "bfloat16" if getattr(args, "bf16", False) else "float32", "bf16 argument")
        self.max_norm = args.max_grad_norm if args.max_grad_norm and args.max_grad_norm > 0 else None
        chain = _chain(model, self.layers)
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps torch's
        self.rec = gradeq_export.TorchRecorder(self.directory, chain, optimizer, scenario,
                                               steps_taken=int(state.global_step))  # resumed from a checkpoint
        self.watch = GradientWatch(chain.named_parameters())
        self.model = model
        self._forward = model.forward

        def forward(*a, **kw):  # what the Trainer feeds, micro-batch by micro-batch
            if model.training and torch.is_grad_enabled():
                self.rec.micro_batch(_part(kw, self.inputs, "inputs"), _part(kw, self.labels, "labels"))
            return self._forward(*a, **kw)

        model.forward = forward

    @staticmethod
    def _schedule(args, state):
        kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
        if kind == "constant":
            return {}
        if kind != "cosine":
            raise ValueError("lr_scheduler_type=%r is not a schedule gradeq models (constant, or cosine: warmup then "
                             "cosine to 0)" % kind)
        if getattr(args, "lr_scheduler_kwargs", None):
            raise ValueError("lr_scheduler_kwargs=%r: gradeq's cosine is the default half cycle"
                             % (args.lr_scheduler_kwargs,))
        total = int(state.max_steps)
        warmup = int(args.get_warmup_steps(total))
        return {"warmup_steps": warmup, "total_steps": total}

    def on_step_begin(self, args, state, control, **kwargs):
        self.rec.begin_window()
        self.watch.take()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        # After the Trainer's clip: .grad is the clipped gradient, and the
        # watch holds it as the last backward left it.
        unclipped = {self.rec.structure.names[n]: g for n, g in self.watch.take().items()}
        if self.max_norm is not None:
            self.rec.record_clip(unclipped, self.max_norm)
        self.rec.before_step()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.rec.after_step()

    def on_train_end(self, args, state, control, **kwargs):
        self.model.forward = self._forward
        self.watch.remove()
        self.rec.close()


class GradeqLightningCallback:
    """A lightning.pytorch.Callback that records the Trainer's run (the
    module's training_step, accumulate_grad_batches, gradient_clip_val, the
    optimizer it configures). Arguments as GradeqTrainerCallback's; inputs
    and labels default to the first two entries of a tuple batch."""

    def __new__(cls, *args, **kwargs):
        import lightning.pytorch as pl

        if not issubclass(cls, pl.Callback):
            cls = type(cls.__name__, (cls, pl.Callback), {})
        return object.__new__(cls)

    def __init__(self, directory, scenario=None, layers="net", inputs=0, labels=1):
        self.directory, self.declared = directory, _settings(scenario, layers)
        self.layers, self.inputs, self.labels = layers, inputs, labels
        self.rec = None
        self._stepping = False

    def on_train_start(self, trainer, pl_module):
        if len(trainer.optimizers) != 1:
            raise ValueError("%d optimizers: gradeq records one" % len(trainer.optimizers))
        precision = str(trainer.precision)
        if precision not in ("32-true", "32", "bf16-mixed"):
            raise ValueError("precision=%r is not recorded yet (32-true, bf16-mixed)" % precision)
        if trainer.gradient_clip_val and trainer.gradient_clip_algorithm not in (None, "norm"):  # None: the default, norm
            raise ValueError("gradient_clip_algorithm=%r: gradeq clips by the global 2-norm"
                             % trainer.gradient_clip_algorithm)
        scenario = dict(self.declared)
        _compute_dtype(scenario, "bfloat16" if precision == "bf16-mixed" else "float32", "precision")
        self.max_norm = float(trainer.gradient_clip_val) if trainer.gradient_clip_val else None
        self.n = int(trainer.accumulate_grad_batches)
        chain = _chain(pl_module, self.layers)
        self.rec = gradeq_export.TorchRecorder(self.directory, chain, trainer.optimizers[0], scenario,
                                               steps_taken=int(trainer.global_step))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx % self.n == 0:
            self.rec.begin_window()
        self.rec.micro_batch(_part(batch, self.inputs, "inputs"), _part(batch, self.labels, "labels"))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        # Before Lightning's clip: .grad is the gradient as accumulated.
        unclipped = self.rec.gradients()
        if self.max_norm is not None:
            self.rec.record_clip(unclipped, self.max_norm)
        self._lr = self.rec.learning_rate()
        self._stepping = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._stepping:  # the step ran: .grad still holds the clipped gradient, the weights are stepped
            self._stepping = False
            self.rec.before_step(learning_rate=self._lr)
            self.rec.after_step()

    def on_train_end(self, trainer, pl_module):
        self.rec.close()
