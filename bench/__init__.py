"""Benchmarks of the gateway: ``python -m bench`` runs the load harness (bench/README.md)."""
