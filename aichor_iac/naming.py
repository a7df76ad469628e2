"""Experiment names that every derived Kubernetes name and host name can hold.

Kubernetes names each pod of an Indexed Job `<job>-<index>` and that host name must be a
DNS label (at most 63 characters); Job names end up in label values (also 63). A long or
unusual experiment name is cleaned and, if still too long, shortened deterministically to a
prefix plus a hash of the original, so the same name always maps to the same objects.
"""

from __future__ import annotations

import hashlib
import re

from .manifest import Manifest, RayPool

MAX_LABEL = 63
HASH_LENGTH = 6


def roles(manifest: Manifest) -> list[tuple[str, int]]:
    """(role, replica count) of every group the manifest asks for; roles name Jobs."""
    result = []
    for name, group in manifest.spec.types.present().items():
        if isinstance(group, list):
            result += [(pool.name, pool.count) for pool in group if isinstance(pool, RayPool)]
        else:
            result.append((name.lower(), group.count))
    return result


def experiment_name(raw: str, manifest: Manifest) -> str:
    """A DNS-1035 label short enough for `<name>-<role>-<last index>` to be one too."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"x-{cleaned}".rstrip("-")
    suffix = max(
        (len(f"-{role}-{max(count - 1, 0)}") for role, count in roles(manifest)), default=0
    )
    budget = MAX_LABEL - suffix
    if len(cleaned) <= budget:
        return cleaned
    digest = hashlib.sha256(raw.encode()).hexdigest()[:HASH_LENGTH]
    return f"{cleaned[: budget - 1 - HASH_LENGTH].rstrip('-')}-{digest}"
