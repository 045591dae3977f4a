"""The worked examples of docs/adding-a-method.md and docs/adding-a-dataset.md: a method and a dataset defined
outside the package, registered and trained by tests/test_examples.py."""
