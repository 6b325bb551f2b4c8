"""mxnet.profiler's API on compiled networks (`api`), with MXNet's aggregate table and the Chrome trace
(`report`). `from mxcc import profiler; profiler.set_config(...); profiler.set_state("run")`."""
from mxcc.profiler.api import (_register, _reset, dump, dump_profile, dumps, pause, profiler_set_config,  # noqa: F401
                               profiler_set_state, resume, scope, set_config, set_state)

__all__ = ["set_config", "set_state", "pause", "resume", "dump", "dumps", "scope", "profiler_set_config",
           "profiler_set_state", "dump_profile"]
