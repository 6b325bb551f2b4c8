"""Lowering (Plan -> KernelCalls) and rendering (KernelCalls -> C source through Jinja)."""
