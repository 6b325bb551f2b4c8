"""Evaluation metrics with MXNet 1.9's semantics (`mx.metric`), over numpy arrays.

`update(labels, preds)` takes lists of arrays (or single arrays) and accumulates, `get()` returns
(name, value) with value nan before any update, `get_name_value()` a list of pairs, `reset()` clears and
`reset_local()` clears only the running part that Speedometer logs (`get_global()` keeps the epoch's).
Metrics read predictions the executor already copied out; computing them in C is not their job.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def check_label_shapes(labels, preds, wrap: bool = False, shape: bool = False):
    """MXNet's helper: compare the number of label and prediction arrays (or their shapes)."""
    if not shape:
        label_shape, pred_shape = len(labels), len(preds)
    else:
        label_shape, pred_shape = labels.shape, preds.shape
    if label_shape != pred_shape:
        raise ValueError(f"Shape of labels {label_shape} does not match shape of predictions {pred_shape}")
    if wrap:
        labels, preds = _as_list(labels), _as_list(preds)
    return labels, preds


class EvalMetric:
    """Base: `sum_metric / num_inst`, kept twice: a local part (reset_local) and a global part."""

    def __init__(self, name: str, output_names=None, label_names=None, has_global_stats: bool = False,
                 **kwargs):
        self.name = str(name)
        self.output_names, self.label_names = output_names, label_names
        self._has_global_stats = has_global_stats
        self._kwargs = kwargs
        self.reset()

    def __str__(self) -> str:
        return f"EvalMetric: {dict(self.get_name_value())}"

    def update(self, labels, preds) -> None:
        raise NotImplementedError

    def update_dict(self, label: dict, pred: dict) -> None:
        preds = [pred[n] for n in self.output_names] if self.output_names is not None else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names is not None else list(label.values())
        self.update(labels, preds)

    def reset(self) -> None:
        self.num_inst, self.sum_metric = 0, 0.0
        self.global_num_inst, self.global_sum_metric = 0, 0.0

    def reset_local(self) -> None:
        self.num_inst, self.sum_metric = 0, 0.0

    def _add(self, value, count: int, global_value=None) -> None:
        self.sum_metric += value
        self.global_sum_metric += value if global_value is None else global_value
        self.num_inst += count
        self.global_num_inst += count

    def get(self):
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, float(self.sum_metric / self.num_inst)

    def get_global(self):
        if not self._has_global_stats:
            return self.get()
        if self.global_num_inst == 0:
            return self.name, float("nan")
        return self.name, float(self.global_sum_metric / self.global_num_inst)

    def get_name_value(self) -> list[tuple[str, float]]:
        return _pairs(*self.get())

    def get_global_name_value(self) -> list[tuple[str, float]]:
        return _pairs(*self.get_global()) if self._has_global_stats else self.get_name_value()

    def get_config(self) -> dict:
        config = dict(self._kwargs)
        config.update(metric=type(self).__name__, name=self.name, output_names=self.output_names,
                      label_names=self.label_names)
        return config


def _pairs(name, value) -> list[tuple[str, float]]:
    names = name if isinstance(name, list) else [name]
    values = value if isinstance(value, list) else [value]
    return list(zip(names, values))


class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; get() returns ([names], [values])."""

    def __init__(self, metrics=None, name: str = "composite", output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names, has_global_stats=True)
        self.metrics = [create(m) for m in (metrics or [])]

    def add(self, metric) -> None:
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        return self.metrics[index]

    def update_dict(self, labels: dict, preds: dict) -> None:
        if self.label_names is not None:
            labels = {k: v for k, v in labels.items() if k in self.label_names}
        if self.output_names is not None:
            preds = {k: v for k, v in preds.items() if k in self.output_names}
        for m in self.metrics:
            m.update_dict(labels, preds)

    def update(self, labels, preds) -> None:
        for m in self.metrics:
            m.update(labels, preds)

    def reset(self) -> None:
        for m in getattr(self, "metrics", ()):
            m.reset()

    def reset_local(self) -> None:
        for m in self.metrics:
            m.reset_local()

    def _collect(self, getter: str):
        names, values = [], []
        for m in self.metrics:
            name, value = getattr(m, getter)()
            names.extend(name if isinstance(name, list) else [name])
            values.extend(value if isinstance(value, list) else [value])
        return names, values

    def get(self):
        return self._collect("get")

    def get_global(self):
        return self._collect("get_global")


class Accuracy(EvalMetric):
    """Fraction of samples whose argmax over `axis` (or the prediction itself, when it already has the
    label's shape) equals the label; both are cast to int32 first, as MXNet does."""

    def __init__(self, axis: int = 1, name: str = "accuracy", output_names=None, label_names=None):
        super().__init__(name, axis=axis, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self.axis = axis

    def update(self, labels, preds) -> None:
        labels, preds = check_label_shapes(_as_list(labels), _as_list(preds))
        for label, pred in zip(labels, preds):
            label, pred = np.asarray(label), np.asarray(pred)
            if pred.shape != label.shape:
                pred = np.argmax(pred, axis=self.axis)
            pred = pred.astype(np.int32).ravel()
            label = label.astype(np.int32).ravel()
            check_label_shapes(label, pred)
            correct = int((pred == label).sum())
            self._add(correct, len(pred))


class TopKAccuracy(EvalMetric):
    """Fraction of samples whose label is among the `top_k` largest predictions (top_k > 1; named
    'top_k_accuracy_<k>')."""

    def __init__(self, top_k: int = 1, name: str = "top_k_accuracy", output_names=None, label_names=None):
        super().__init__(name, top_k=top_k, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        if top_k <= 1:
            raise ValueError("Please use Accuracy if top_k is no more than 1")
        self.top_k = top_k
        self.name += f"_{top_k}"

    def update(self, labels, preds) -> None:
        labels, preds = check_label_shapes(_as_list(labels), _as_list(preds))
        for label, pred in zip(labels, preds):
            pred = np.asarray(pred, dtype=np.float32)
            if pred.ndim > 2:
                raise ValueError("Predictions should be no more than 2 dims")
            top = np.argpartition(pred, -self.top_k)
            label = np.asarray(label).astype(np.int32)
            check_label_shapes(label, top)
            if top.ndim == 1:
                # NOTE: MXNet counts these in the local sum only (its global sum misses them).
                self._add(int((top.ravel() == label.ravel()).sum()), top.shape[0], global_value=0)
                continue
            classes = top.shape[1]
            correct = sum(int((top[:, classes - 1 - j].ravel() == label.ravel()).sum())
                          for j in range(min(classes, self.top_k)))
            self._add(correct, top.shape[0])


class CrossEntropy(EvalMetric):
    """Mean over samples of -log(p[label] + eps) (float32 logs, as MXNet computes them)."""

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy", output_names=None, label_names=None):
        super().__init__(name, eps=eps, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self.eps = eps

    def update(self, labels, preds) -> None:
        labels, preds = check_label_shapes(_as_list(labels), _as_list(preds))
        for label, pred in zip(labels, preds):
            label, pred = np.asarray(label).ravel(), np.asarray(pred)
            if label.shape[0] != pred.shape[0]:
                raise ValueError(f"{label.shape[0]} labels for {pred.shape[0]} predictions")
            prob = pred[np.arange(label.shape[0]), label.astype(np.int64)]
            ce = float((-np.log(prob + prob.dtype.type(self.eps))).sum())
            self._add(ce, label.shape[0])


_REGISTRY = {"accuracy": Accuracy, "acc": Accuracy, "topkaccuracy": TopKAccuracy,
             "top_k_accuracy": TopKAccuracy, "top_k_acc": TopKAccuracy, "crossentropy": CrossEntropy,
             "ce": CrossEntropy, "compositeevalmetric": CompositeEvalMetric, "composite": CompositeEvalMetric}


def create(metric, *args, **kwargs) -> EvalMetric:
    """A metric from an instance, a (case-insensitive) name or alias ('acc', 'ce', 'top_k_accuracy', ...),
    or a list of those (a CompositeEvalMetric)."""
    if isinstance(metric, EvalMetric):
        return metric
    if isinstance(metric, Sequence) and not isinstance(metric, str):
        composite = CompositeEvalMetric()
        for m in metric:
            composite.add(create(m, *args, **kwargs))
        return composite
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a name, an EvalMetric or a list, got {type(metric).__name__}")
    cls = _REGISTRY.get(metric.lower())
    if cls is None:
        raise ValueError(f"{metric} is not a known metric (mxcc has: {', '.join(sorted(_REGISTRY))})")
    return cls(*args, **kwargs)


__all__ = ["Accuracy", "CompositeEvalMetric", "CrossEntropy", "EvalMetric", "TopKAccuracy", "create",
           "check_label_shapes"]
