"""One module per dataset; each named in ``knowledge_lm.core.catalog``'s ``DATASET_ENTRIES``."""
