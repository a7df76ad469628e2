"""A Ray job's wait (`frameworks/ray.py`): until `expected` nodes other than this one are alive,
logged, bounded. argv: expected node count, this node's IP ("" counts every node), deadline in
seconds."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import ray

expected, me, deadline = int(sys.argv[1]), sys.argv[2], time.time() + int(sys.argv[3])
address = os.environ["RAY_ADDRESS"]
auth: dict[str, Any] = (
    {"_redis_password": os.environ["REDIS_PASSWORD"]} if ray.__version__[:2] == "1." else {}
)
ray.init(address=address, logging_level=logging.WARNING, **auth)
while True:
    nodes = [n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] != me]
    print(f"ray_address={address}, node_count={len(nodes)}, expected_node_count={expected}")
    if len(nodes) >= expected:
        break
    if time.time() >= deadline:
        sys.exit(f"aichor: gave up waiting for {expected} Ray nodes")
    print("retrying in 2s", flush=True)
    time.sleep(2)
ray.shutdown()
