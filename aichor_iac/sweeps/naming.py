"""A trial's name, as Katib gives it: the same for the same sweep and index on every render."""

from __future__ import annotations

import hashlib

ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' rand.String, which Katib's names use


def trial_name(experiment: str, index: int, between: str = "-", size: int = 8) -> str:
    """Katib names a trial `<experiment>-<8 random characters>` (Trainer's OptimizationJob
    proposal `<job>-trial-<5>`: `between`, `size`); here the characters come from the
    experiment's name and the trial's index, so every render names it alike."""
    digest = hashlib.sha256(f"{experiment}/{index}".encode()).digest()
    return experiment + between + "".join(ALPHABET[b % len(ALPHABET)] for b in digest[:size])
