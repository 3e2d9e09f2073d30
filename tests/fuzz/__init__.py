"""Differential fuzzer: random programs and mutations between calls, each compiled call compared with eager."""
from .generator import ALL_FAMILIES, KNOWN_OPEN, Case, generate
from .runner import Failure, batch, run_and_record, run_one

__all__ = ["ALL_FAMILIES", "KNOWN_OPEN", "Case", "Failure", "batch", "generate", "run_and_record", "run_one"]
