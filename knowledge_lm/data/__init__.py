"""One module per dataset; each registers its data module with ``@register_dataset``."""
