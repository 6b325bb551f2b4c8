"""The runtime front: a compiled directory loaded into this process (never the compiler).

- `module`: Module (inference), `load`;
- `executor`: Executor (training: forward/backward/update);
- `extension`: loading a compiled extension module by path.
"""
