"""Experiment names that every derived Kubernetes name and host name can hold.

Kubernetes names each pod of an Indexed Job `<job>-<index>` and that host name must be a
DNS label (at most 63 characters); Job names end up in label values (also 63). A name that is
already one (upper case aside) is kept; any other is cleaned and gets a hash of the original,
so names that clean alike (`a_b` and `a.b`, `名前` and `🚀`) still name different objects; one
still too long is shortened to a prefix plus that hash. The same name always maps to the same
objects.
"""

from __future__ import annotations

import hashlib
import re

MAX_LABEL = 63
HASH_LENGTH = 6


def experiment_name(raw: str, roles: list[tuple[str, int]]) -> str:
    """A DNS-1035 label short enough for `<name>-<role>-<last index>` to be one too, for
    every (role, replica count) of the experiment's groups."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"x-{cleaned}".rstrip("-")
    suffix = max((len(f"-{role}-{max(count - 1, 0)}") for role, count in roles), default=0)
    budget = MAX_LABEL - suffix
    if cleaned == raw.lower() and len(cleaned) <= budget:
        return cleaned
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_LENGTH]
    return f"{cleaned[: budget - 1 - HASH_LENGTH].rstrip('-')}-{digest}"
