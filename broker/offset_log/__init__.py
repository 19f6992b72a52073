"""Consumer offset commits through the commit log (``offsetCommitThroughLog``, DESIGN.md 3b):
the writer appends commits and resets as records of ``RMQ_SYS_CONSUMER_OFFSETS``, the applier
applies them from the log on every node, the service wires both into a node. Import from the
owning module."""
