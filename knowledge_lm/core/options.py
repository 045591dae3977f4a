"""Parsing option values given as text (``--set name=value``) or YAML."""


def parse_bool(value) -> bool:
    """A YAML boolean, or ``--set name=true|false`` (also 1/0, yes/no)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(value)
