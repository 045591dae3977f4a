"""One module per method; each registers its classes with ``@register_method``."""
