"""Consumer offset commits as commit log records (DESIGN.md section 3b): the one owner of the
record's format, read by the broker (which writes and applies them) and the audit (which judges
them). The model and its validation are :mod:`.model`, the builder :mod:`.builder`, the reader
:mod:`.reader`; import from the owning module."""
