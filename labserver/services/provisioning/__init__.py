"""Environments: state changes, admission, image and limits, warm pools, culling, saving files (README.md)."""
