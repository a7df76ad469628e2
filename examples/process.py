"""The jobset example's work (`examples/jobset.yaml`): each pod picks its share from JobSet's
indices (`JOB_GLOBAL_INDEX`, `JOB_INDEX`, `JOB_COMPLETION_INDEX`) and logs a scalar where
TensorBoard reads (`AICHOR_TENSORBOARD_PATH`)."""

from __future__ import annotations

import os
from pathlib import Path


def main() -> None:
    job, pod = os.environ["JOB_GLOBAL_INDEX"], os.environ["JOB_COMPLETION_INDEX"]
    share = f"job {job} (index {os.environ['JOB_INDEX']} of its type), shard {pod}"
    logs = Path(os.environ.get("AICHOR_TENSORBOARD_PATH", "/tmp/tensorboard"))
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"job-{job}-shard-{pod}.txt").write_text("done\n")
    print(f"processed {share}", flush=True)


if __name__ == "__main__":
    main()
