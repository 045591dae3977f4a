"""The base layer: errors, paths, I/O, caches, the result store, name registries, backbones, option parsing."""
