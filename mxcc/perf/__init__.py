"""`mxcc perf`: run a compiled network's benchmark under Linux perf and explain where the time goes.

- `record`: runs perf (or py-spy) and writes the report files;
- `stacks`: parses the samples and attributes them to layers and runtime functions;
- `flamegraph`: the SVG.
"""
