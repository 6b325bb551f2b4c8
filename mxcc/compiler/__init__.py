"""The compiler: front end -> passes -> codegen -> build, and the output directory it writes.

- `driver`: `compile`, `inspect_network`, `plan_network` (the stages in order, training setup);
- `artifacts`: the layout of an output directory (file names, module.json), shared with the runtime;
- `build`: the C compiler, cffi and the content-hashed cache.

Nothing is imported here, so that the runtime can import `mxcc.compiler.artifacts` without the compiler.
"""
