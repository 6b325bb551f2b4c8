"""MXNet's training API on compiled networks: optimizer, lr_scheduler, initializer, metric, callback, model
(fit, checkpoints), io (data iterators) and idx (the MNIST file format).

Also importable under MXNet's names (`mxcc.optimizer`, `mxcc.metric`, `mxcc.io`, ...): mxcc/__init__.py
registers those aliases.
"""
