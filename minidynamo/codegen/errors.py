"""Why the code generators leave an op, or a whole graph, to torch."""


class CannotLower(Exception):
    """A lowering cannot take its arguments: the op becomes an extern call into torch."""


class CannotCompile(Exception):
    """The graph as a whole cannot be compiled (it mutates its inputs, its tensors are on several
    devices, ...): the backend runs it eagerly."""


class EagerRejects(CannotCompile):
    """Eager raises on the graph's inputs, so the graph is not compiled: run eagerly, it raises
    eager's own error."""
