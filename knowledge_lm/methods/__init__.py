"""One module per method; each named in ``knowledge_lm.core.catalog``'s ``METHOD_ENTRIES``."""
